package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/services/history"
)

// TestConnectThroughContext runs commands against a server that requires a token and TLS,
// reached through a nats CLI context and through the connection flags. It sets the
// environment, so it does not run in parallel.
func TestConnectThroughContext(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "FLOW_NATS_") || strings.HasPrefix(name, "NATS_") {
			t.Setenv(name, "")
		}
	}
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	files := natstest.GenerateTLS(t, dir)
	ns := natstest.RunServer(t, &server.Options{JetStream: true, Authorization: "s3cret",
		TLS: true, TLSVerify: true, TLSConfig: files.Server, TLSTimeout: 5})
	url := ns.ClientURL()

	nc, err := natsconn.Config{URL: url, Token: "s3cret", TLS: natsconn.TLS{CA: files.CA, Cert: files.ClientCert, Key: files.ClientKey}}.Dial("test")
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	h, err := history.New(history.Config{Conn: nc, HTTPAddr: "off", Logger: natstest.Logger()})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { _ = h.Stop() })

	ctxDir := filepath.Join(dir, "nats", "context")
	require.NoError(t, os.MkdirAll(ctxDir, 0o700))
	body := fmt.Sprintf(`{"url": %q, "token": "s3cret", "ca": %q, "cert": %q, "key": %q}`, url, files.CA, files.ClientCert, files.ClientKey)
	require.NoError(t, os.WriteFile(filepath.Join(ctxDir, "secure.json"), []byte(body), 0o600))

	r := run(t, "runs", "--context", "secure", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, "[]", r.stdout)

	t.Setenv("NATS_CONTEXT", "secure")
	r = run(t, "runs", "--json")
	require.Equal(t, 0, r.code, r.stderr)

	// The flags replace the context's settings one by one, and credentials as a whole.
	r = run(t, "runs", "--user", "ann", "--password", "pw")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `flow: NATS unreachable: cannot connect to `+url+` (from url in NATS context "secure"`)
	require.Contains(t, r.stderr, `as user "ann" (from --user): nats: Authorization Violation; the server refused the credentials`)

	t.Setenv("NATS_CONTEXT", "")
	r = run(t, "runs", "-s", url, "--tlsca", files.CA, "--tlscert", files.ClientCert, "--tlskey", files.ClientKey)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "the server requires credentials")

	t.Setenv("FLOW_NATS_TOKEN", "s3cret")
	r = run(t, "runs", "-s", url, "--tlsca", files.CA, "--tlscert", files.ClientCert, "--tlskey", files.ClientKey, "--json")
	require.Equal(t, 0, r.code, r.stderr)

	missing := filepath.Join(dir, "gone.creds")
	t.Setenv("FLOW_NATS_TOKEN", "")
	r = run(t, "runs", "-s", url, "--creds", missing)
	require.Equal(t, 1, r.code)
	require.Equal(t, "flow: NATS creds file "+missing+" (from --creds) does not exist; fix the path, or drop the setting to connect without it\n", r.stderr)

	r = run(t, "runs", "--context", "staging")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `flow: unknown NATS context "staging" (from --context): no file `+filepath.Join(ctxDir, "staging.json")+" (known: secure)")
}
