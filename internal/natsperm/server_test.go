package natsperm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natsperm"
	"github.com/flowrun/flow/internal/natstest"
)

// password is the test password of role r.
func password(r natsperm.Role) string { return "pw-" + r.Name + "-secret" }

// setPasswords sets every role's password variable, as nats-server's environment would.
func setPasswords(t *testing.T) {
	for _, r := range natsperm.Roles() {
		t.Setenv(r.PasswordEnv, password(r))
	}
}

// violations collects the permission violations a server logs: every refused publish or
// subscription, with the connection (whose name is the service's) that attempted it.
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *violations) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if strings.Contains(line, "Violation") {
		v.mu.Lock()
		v.lines = append(v.lines, line)
		v.mu.Unlock()
	}
}

func (v *violations) Noticef(format string, args ...any) { v.logf(format, args...) }
func (v *violations) Warnf(format string, args ...any)   { v.logf(format, args...) }
func (v *violations) Fatalf(format string, args ...any)  { v.logf(format, args...) }
func (v *violations) Errorf(format string, args ...any)  { v.logf(format, args...) }
func (v *violations) Debugf(string, ...any)              {}
func (v *violations) Tracef(string, ...any)              {}

// Seen returns the violations logged so far.
func (v *violations) Seen() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.lines...)
}

// runServer isolates the test (isolate) and starts a nats-server from a configuration that
// includes the repository's deploy/nats/auth.conf, as a deployment does, with the roles'
// passwords in the environment. tlsBlock, when not empty, is the server's tls block: TLS is then
// required of every client.
func runServer(t *testing.T, tlsBlock string) (*server.Server, *violations) {
	isolate(t)
	setPasswords(t)
	dir := t.TempDir()
	auth, err := os.ReadFile(repoFile(natsperm.AuthConfPath))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "auth.conf"), auth, 0o600))
	conf := fmt.Sprintf("server_name: flow-test\njetstream {\n  store_dir: %q\n}\n%s\ninclude auth.conf\n", filepath.Join(dir, "js"), tlsBlock)
	path := filepath.Join(dir, "nats-server.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err)
	require.True(t, opts.JetStream, "the configuration enables JetStream")
	srv := natstest.RunServer(t, opts)
	v := &violations{}
	srv.SetLogger(v, false, false)
	return srv, v
}
