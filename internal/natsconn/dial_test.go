package natsconn_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natstest"
)

// isolate clears the environment a Config reads and points the nats CLI's configuration at an
// empty directory, which it returns.
func isolate(t *testing.T) string {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "FLOW_NATS_") || strings.HasPrefix(name, "NATS_") {
			t.Setenv(name, "")
		}
	}
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("HOME", filepath.Join(dir, "home"))
	return dir
}

// roundTrip checks that nc works: a request to a subscription of its own.
func roundTrip(t *testing.T, nc *nats.Conn) {
	t.Helper()
	defer nc.Close()
	sub, err := nc.Subscribe("ping", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	reply, err := nc.Request("ping", nil, natsconn.ConnectTimeout)
	require.NoError(t, err)
	require.Equal(t, "pong", string(reply.Data))
}

func TestEnvironmentNames(t *testing.T) {
	isolate(t)
	for name, value := range map[string]string{
		"FLOW_NATS_URL": "nats://n1:4222,nats://n2:4222", "FLOW_NATS_CREDS": "/run/flow.creds", "FLOW_NATS_NKEY": "/run/flow.nk",
		"FLOW_NATS_USER": "ann", "FLOW_NATS_PASSWORD": "pw", "FLOW_NATS_TOKEN": "tok",
		"FLOW_NATS_TLS_CA": "/etc/ca.pem", "FLOW_NATS_TLS_CERT": "/etc/cert.pem", "FLOW_NATS_TLS_KEY": "/etc/key.pem",
		"FLOW_NATS_TLS_FIRST": "true", "FLOW_NATS_CONTEXT": "prod",
		// envconfig falls back to a tag's unprefixed name: Config must not read these.
		"USER": "login-name", "PASSWORD": "x", "TOKEN": "x", "URL": "x", "CONTEXT": "x", "CREDS": "x", "CA": "x",
	} {
		t.Setenv(name, value)
	}
	want := natsconn.Config{URL: "nats://n1:4222,nats://n2:4222", Creds: "/run/flow.creds", NKey: "/run/flow.nk",
		User: "ann", Password: "pw", Token: "tok", Context: "prod",
		TLS: natsconn.TLS{CA: "/etc/ca.pem", Cert: "/etc/cert.pem", Key: "/etc/key.pem", First: true}}

	var alone natsconn.Config
	require.NoError(t, envconfig.Process("FLOW_NATS", &alone))
	require.Equal(t, want, alone)

	var nested struct {
		NATS natsconn.Config `envconfig:"NATS"`
	}
	require.NoError(t, envconfig.Process("FLOW", &nested))
	require.Equal(t, want, nested.NATS)

	for _, name := range []string{"FLOW_NATS_CREDS", "FLOW_NATS_USER", "FLOW_NATS_PASSWORD", "FLOW_NATS_TOKEN"} {
		t.Setenv(name, "")
	}
	var none natsconn.Config
	require.NoError(t, envconfig.Process("FLOW_NATS", &none))
	require.Empty(t, none.User, "USER is the login name, not a NATS user")
}

func TestDialUnreachable(t *testing.T) {
	isolate(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "nats://" + l.Addr().String()
	require.NoError(t, l.Close())
	t.Setenv("NATS_URL", url)

	_, err = natsconn.Config{}.Dial("test")
	require.ErrorIs(t, err, natsconn.ErrUnreachable)
	require.ErrorContains(t, err, "cannot connect to "+url+" (from NATS_URL): ")
	require.ErrorContains(t, err, "start Flow with `flow dev`, or point FLOW_NATS_URL")

	_, err = natsconn.Dial(url, "test")
	require.ErrorIs(t, err, natsconn.ErrUnreachable)
	require.ErrorContains(t, err, "(from the URL given)")
}

func TestDialToken(t *testing.T) {
	isolate(t)
	ns := natstest.RunServer(t, &server.Options{Authorization: "s3cret"})
	url := ns.ClientURL()

	nc, err := natsconn.Config{URL: url, Token: "s3cret"}.Dial("test")
	require.NoError(t, err)
	roundTrip(t, nc)

	_, err = natsconn.Config{URL: url}.Dial("test")
	require.ErrorIs(t, err, natsconn.ErrUnreachable)
	require.ErrorContains(t, err, "the server requires credentials")

	t.Setenv("FLOW_NATS_TOKEN", "wrong")
	_, err = natsconn.Config{URL: url}.Dial("test")
	require.ErrorIs(t, err, natsconn.ErrUnreachable)
	require.ErrorContains(t, err, "with a token (from FLOW_NATS_TOKEN)")
	require.ErrorContains(t, err, "the server refused the credentials")
	require.NotContains(t, err.Error(), "wrong", "errors do not show secrets")
}

func TestDialUserPassword(t *testing.T) {
	isolate(t)
	ns := natstest.RunServer(t, &server.Options{Username: "ann", Password: "pw"})
	t.Setenv("NATS_USER", "ann")
	t.Setenv("NATS_PASSWORD", "pw")
	nc, err := natsconn.Config{URL: ns.ClientURL()}.Dial("test")
	require.NoError(t, err)
	roundTrip(t, nc)
}

func TestDialNKey(t *testing.T) {
	dir := isolate(t)
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := user.PublicKey()
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	seedFile := filepath.Join(dir, "flow.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	ns := natstest.RunServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})

	nc, err := natsconn.Config{URL: ns.ClientURL(), NKey: seedFile}.Dial("test")
	require.NoError(t, err)
	roundTrip(t, nc)

	missing := filepath.Join(dir, "missing.nk")
	t.Setenv("FLOW_NATS_NKEY", missing)
	_, err = natsconn.Config{URL: ns.ClientURL()}.Dial("test")
	require.NotErrorIs(t, err, natsconn.ErrUnreachable)
	require.EqualError(t, err, "flow: NATS nkey seed file "+missing+" (from FLOW_NATS_NKEY) does not exist; fix the path, or drop the setting to connect without it")

	notSeed := filepath.Join(dir, "not-a-seed")
	require.NoError(t, os.WriteFile(notSeed, []byte(pub), 0o600))
	_, err = natsconn.Config{URL: ns.ClientURL(), NKey: notSeed}.Dial("test")
	require.ErrorContains(t, err, "flow: NATS nkey seed file "+notSeed+" (from Config.NKey): ")
	require.ErrorContains(t, err, "it must hold a user seed")
}

func TestDialTLS(t *testing.T) {
	dir := isolate(t)
	files := natstest.GenerateTLS(t, dir)
	ns := natstest.RunServer(t, &server.Options{TLS: true, TLSVerify: true, TLSConfig: files.Server, TLSTimeout: 5})
	url := ns.ClientURL()

	cfg := natsconn.Config{URL: url, TLS: natsconn.TLS{CA: files.CA, Cert: files.ClientCert, Key: files.ClientKey}}
	nc, err := cfg.Dial("test")
	require.NoError(t, err)
	roundTrip(t, nc)

	t.Run("NoClientCertificate", func(t *testing.T) {
		_, err := natsconn.Config{URL: url, TLS: natsconn.TLS{CA: files.CA}}.Dial("test")
		require.ErrorIs(t, err, natsconn.ErrUnreachable)
		require.ErrorContains(t, err, "it may require a client certificate")
	})
	t.Run("UnknownCA", func(t *testing.T) {
		_, err := natsconn.Config{URL: strings.Replace(url, "nats://", "tls://", 1),
			TLS: natsconn.TLS{Cert: files.ClientCert, Key: files.ClientKey}}.Dial("test")
		require.ErrorIs(t, err, natsconn.ErrUnreachable)
		require.ErrorContains(t, err, "the server's TLS certificate is not trusted: give the CA that signs it")
	})
	t.Run("CertificateWithoutKey", func(t *testing.T) {
		t.Setenv("NATS_CERT", files.ClientCert)
		_, err := natsconn.Config{URL: url, TLS: natsconn.TLS{CA: files.CA}}.Dial("test")
		require.EqualError(t, err, "flow: NATS TLS client certificate "+files.ClientCert+" (from NATS_CERT) has no key; set the key too (FLOW_NATS_TLS_KEY, --tlskey)")
	})
	t.Run("MissingCA", func(t *testing.T) {
		_, err := natsconn.Config{URL: url, TLS: natsconn.TLS{CA: filepath.Join(dir, "nope.pem")}}.Dial("test")
		require.ErrorContains(t, err, "flow: NATS TLS CA file "+filepath.Join(dir, "nope.pem")+" (from Config.TLS.CA) does not exist")
	})
	t.Run("HandshakeFirst", func(t *testing.T) {
		first := natstest.RunServer(t, &server.Options{TLS: true, TLSVerify: true, TLSConfig: files.Server, TLSTimeout: 5, TLSHandshakeFirst: true})
		cfg := natsconn.Config{URL: first.ClientURL(), TLS: natsconn.TLS{CA: files.CA, Cert: files.ClientCert, Key: files.ClientKey, First: true}}
		nc, err := cfg.Dial("test")
		require.NoError(t, err)
		roundTrip(t, nc)
	})
}

func TestDialCreds(t *testing.T) {
	dir := isolate(t)
	opts := &server.Options{}
	creds := natstest.Operator(t, opts)
	ns := natstest.RunServer(t, opts)
	credsFile := filepath.Join(dir, "flow.creds")
	require.NoError(t, os.WriteFile(credsFile, creds, 0o600))

	t.Setenv("FLOW_NATS_CREDS", credsFile)
	nc, err := natsconn.Config{URL: ns.ClientURL()}.Dial("test")
	require.NoError(t, err)
	roundTrip(t, nc)

	t.Setenv("FLOW_NATS_CREDS", "")
	_, err = natsconn.Config{URL: ns.ClientURL()}.Dial("test")
	require.ErrorIs(t, err, natsconn.ErrUnreachable)
	require.ErrorContains(t, err, "the server requires credentials")

	missing := filepath.Join(dir, "gone.creds")
	_, err = natsconn.Config{URL: ns.ClientURL(), Creds: missing}.Dial("test")
	require.EqualError(t, err, "flow: NATS creds file "+missing+" (from Config.Creds) does not exist; fix the path, or drop the setting to connect without it")

	_, err = natsconn.Config{URL: ns.ClientURL(), Creds: filepath.Join(dir)}.Dial("test")
	require.ErrorContains(t, err, "flow: NATS creds file "+dir+" (from Config.Creds): ")
}

// TestDialContext connects through the nats CLI's selected context, with its credentials and
// TLS files.
func TestDialContext(t *testing.T) {
	dir := isolate(t)
	files := natstest.GenerateTLS(t, dir)
	ns := natstest.RunServer(t, &server.Options{TLS: true, TLSConfig: files.Server, TLSVerify: true, TLSTimeout: 5, Authorization: "s3cret"})
	ctxDir := filepath.Join(dir, "nats", "context")
	require.NoError(t, os.MkdirAll(ctxDir, 0o700))
	body := fmt.Sprintf(`{"description": "test", "url": %q, "token": "s3cret", "ca": %q, "cert": %q, "key": %q}`,
		ns.ClientURL(), files.CA, files.ClientCert, files.ClientKey)
	require.NoError(t, os.WriteFile(filepath.Join(ctxDir, "secure.json"), []byte(body), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats", "context.txt"), []byte("secure"), 0o600))

	nc, err := natsconn.Config{}.Dial("test")
	require.NoError(t, err)
	roundTrip(t, nc)

	_, err = natsconn.Config{Context: "other"}.Dial("test")
	require.ErrorContains(t, err, `unknown NATS context "other" (from Config.Context): no file `+filepath.Join(ctxDir, "other.json")+" (known: secure)")
}
