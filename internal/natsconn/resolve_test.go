package natsconn

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// envNames are the environment variables a Config reads.
var envNames = []string{
	"FLOW_NATS_URL", "NATS_URL", "FLOW_NATS_CREDS", "NATS_CREDS", "FLOW_NATS_NKEY", "NATS_NKEY",
	"FLOW_NATS_USER", "NATS_USER", "FLOW_NATS_PASSWORD", "NATS_PASSWORD", "FLOW_NATS_TOKEN",
	"FLOW_NATS_TLS_CA", "NATS_CA", "FLOW_NATS_TLS_CERT", "NATS_CERT", "FLOW_NATS_TLS_KEY", "NATS_KEY",
	"FLOW_NATS_TLS_FIRST", "FLOW_NATS_CONTEXT", "NATS_CONTEXT",
}

// isolate clears the environment a Config reads and points the nats CLI's configuration at an
// empty directory, which it returns (contexts go in <dir>/nats/context).
func isolate(t *testing.T) string {
	for _, name := range envNames {
		t.Setenv(name, "")
	}
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("HOME", filepath.Join(dir, "home"))
	return dir
}

func writeContext(t *testing.T, dir, name, body string) string {
	t.Helper()
	ctxDir := filepath.Join(dir, "nats", "context")
	require.NoError(t, os.MkdirAll(ctxDir, 0o700))
	path := filepath.Join(ctxDir, name+".json")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

func selectContext(t *testing.T, dir, name string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats", "context.txt"), []byte(name+"\n"), 0o600))
}

func TestResolveURLOrder(t *testing.T) {
	for _, tc := range []struct {
		name            string
		cfg             Config
		env             map[string]string
		selected        bool // select the context "sel" (url nats://sel:4222)
		url, source     string
		contextFileName string // the context file the source names, if any
	}{
		{name: "Default", url: DefaultURL, source: "the default"},
		{name: "NATSURL", env: map[string]string{"NATS_URL": "nats://cli:4222"}, url: "nats://cli:4222", source: "NATS_URL"},
		{name: "FlowBeatsNATS", env: map[string]string{"FLOW_NATS_URL": "nats://flow:4222", "NATS_URL": "nats://cli:4222"},
			url: "nats://flow:4222", source: "FLOW_NATS_URL"},
		{name: "FieldBeatsEnv", cfg: Config{URL: "nats://a:4222,nats://b:4222"}, env: map[string]string{"FLOW_NATS_URL": "nats://flow:4222"},
			url: "nats://a:4222,nats://b:4222", source: "Config.URL"},
		{name: "FieldFromEnvconfig", cfg: Config{URL: "nats://flow:4222"}, env: map[string]string{"FLOW_NATS_URL": "nats://flow:4222"},
			url: "nats://flow:4222", source: "FLOW_NATS_URL"},
		{name: "FieldWithOrigin", cfg: Config{URL: "nats://a:4222", Origin: func(f string) string { return map[string]string{"URL": "--server"}[f] }},
			url: "nats://a:4222", source: "--server"},
		{name: "SelectedContext", selected: true, url: "nats://sel:4222", source: `url in NATS context "sel"`, contextFileName: "sel"},
		{name: "NATSURLBeatsContext", selected: true, env: map[string]string{"NATS_URL": "nats://cli:4222"}, url: "nats://cli:4222", source: "NATS_URL"},
		{name: "NamedBeatsSelected", selected: true, env: map[string]string{"NATS_CONTEXT": "named"},
			url: "nats://named:4222", source: `url in NATS context "named"`, contextFileName: "named"},
		{name: "FlowContextBeatsNATSContext", env: map[string]string{"FLOW_NATS_CONTEXT": "other", "NATS_CONTEXT": "named"},
			url: "nats://other:4222", source: `url in NATS context "other"`, contextFileName: "other"},
		{name: "ContextFieldBeatsEnv", cfg: Config{Context: "named"}, env: map[string]string{"FLOW_NATS_CONTEXT": "other"},
			url: "nats://named:4222", source: `url in NATS context "named"`, contextFileName: "named"},
		{name: "ContextWithoutURL", cfg: Config{Context: "nourl"}, url: DefaultURL, source: "the default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := isolate(t)
			for _, n := range []string{"sel", "named", "other"} {
				writeContext(t, dir, n, `{"url": "nats://`+n+`:4222", "description": "ignored"}`)
			}
			writeContext(t, dir, "nourl", `{"token": "t"}`)
			if tc.selected {
				selectContext(t, dir, "sel")
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			r, err := tc.cfg.resolve()
			require.NoError(t, err)
			require.Equal(t, tc.url, r.url.value)
			source := tc.source
			if tc.contextFileName != "" {
				source += " (" + filepath.Join(dir, "nats", "context", tc.contextFileName+".json") + ")"
			}
			require.Equal(t, source, r.url.source)
		})
	}
}

func TestResolveCredentials(t *testing.T) {
	t.Run("ContextSuppliesAll", func(t *testing.T) {
		dir := isolate(t)
		writeContext(t, dir, "prod", `{"url": "tls://prod:4222", "creds": "~/prod.creds", "ca": "/etc/ca.pem",
			"cert": "/etc/cert.pem", "key": "/etc/key.pem", "tls_first": true, "inbox_prefix": "_INBOX_flow"}`)
		selectContext(t, dir, "prod")
		r, err := Config{}.resolve()
		require.NoError(t, err)
		require.Equal(t, filepath.Join(dir, "home", "prod.creds"), r.creds.value, "~ expands to the home directory")
		require.Contains(t, r.creds.source, `creds in NATS context "prod"`)
		require.Equal(t, []string{"/etc/ca.pem", "/etc/cert.pem", "/etc/key.pem"}, []string{r.ca.value, r.cert.value, r.key.value})
		require.True(t, r.tlsFirst)
		require.Equal(t, "_INBOX_flow", r.inboxPrefix)
	})
	t.Run("EnvironmentReplacesContextCredentials", func(t *testing.T) {
		dir := isolate(t)
		writeContext(t, dir, "dev", `{"user": "ann", "password": "pw", "ca": "/etc/ca.pem"}`)
		t.Setenv("FLOW_NATS_CONTEXT", "dev")
		t.Setenv("NATS_CREDS", "/run/flow.creds")
		r, err := Config{}.resolve()
		require.NoError(t, err)
		require.Equal(t, setting{value: "/run/flow.creds", source: "NATS_CREDS", level: 2}, r.creds)
		require.Empty(t, r.user.value, "the context's user is replaced, not combined")
		require.Empty(t, r.password.value)
		require.Equal(t, "/etc/ca.pem", r.ca.value, "TLS files are taken one by one")
	})
	t.Run("UserAndPasswordFromEnvironment", func(t *testing.T) {
		isolate(t)
		t.Setenv("FLOW_NATS_USER", "ann")
		t.Setenv("NATS_PASSWORD", "pw")
		r, err := Config{}.resolve()
		require.NoError(t, err)
		require.Equal(t, []string{"ann", "pw"}, []string{r.user.value, r.password.value})
	})
	t.Run("TwoKindsAtOnce", func(t *testing.T) {
		isolate(t)
		_, err := Config{Creds: "/a.creds", Token: "t"}.resolve()
		require.EqualError(t, err, "flow: NATS credentials of more than one kind: creds (from Config.Creds), token (from Config.Token); give only one of creds, nkey, user and password, or token")
	})
	t.Run("TLSFirstFromEnvironment", func(t *testing.T) {
		isolate(t)
		t.Setenv("FLOW_NATS_TLS_FIRST", "true")
		r, err := Config{}.resolve()
		require.NoError(t, err)
		require.True(t, r.tlsFirst)
		t.Setenv("FLOW_NATS_TLS_FIRST", "sometimes")
		_, err = Config{}.resolve()
		require.EqualError(t, err, `flow: FLOW_NATS_TLS_FIRST must be true or false, got "sometimes"`)
	})
}

func TestResolveContextErrors(t *testing.T) {
	t.Run("UnknownNamed", func(t *testing.T) {
		dir := isolate(t)
		writeContext(t, dir, "dev", `{}`)
		writeContext(t, dir, "prod", `{}`)
		_, err := Config{Context: "staging"}.resolve()
		ctxDir := filepath.Join(dir, "nats", "context")
		require.EqualError(t, err, `flow: unknown NATS context "staging" (from Config.Context): no file `+filepath.Join(ctxDir, "staging.json")+
			" (known: dev, prod); create it with `nats context add staging --server URL`, or name another")
	})
	t.Run("UnknownSelected", func(t *testing.T) {
		dir := isolate(t)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "nats"), 0o700))
		selectContext(t, dir, "gone")
		_, err := Config{}.resolve()
		require.ErrorContains(t, err, `unknown NATS context "gone" (from selected in `+filepath.Join(dir, "nats", "context.txt")+`): no file `)
		require.ErrorContains(t, err, "(there are none)")
	})
	t.Run("NoneSelected", func(t *testing.T) {
		isolate(t)
		r, err := Config{}.resolve()
		require.NoError(t, err)
		require.Equal(t, DefaultURL, r.url.value)
	})
	t.Run("InvalidName", func(t *testing.T) {
		isolate(t)
		_, err := Config{Context: "../secrets"}.resolve()
		require.ErrorContains(t, err, `NATS context name "../secrets" (from Config.Context) is not valid`)
	})
	t.Run("NotJSON", func(t *testing.T) {
		dir := isolate(t)
		path := writeContext(t, dir, "bad", `url: nats://x`)
		_, err := Config{Context: "bad"}.resolve()
		require.ErrorContains(t, err, `NATS context "bad" (`+path+`) is not a valid context file`)
	})
	t.Run("Unsupported", func(t *testing.T) {
		dir := isolate(t)
		path := writeContext(t, dir, "leaf", `{"url": "nats://leaf:4222", "jetstream_domain": "hub"}`)
		_, err := Config{Context: "leaf"}.resolve()
		require.EqualError(t, err, `flow: NATS context "leaf" (`+path+`) sets jetstream_domain, which Flow does not support; use a context without it, or connect with FLOW_NATS_URL and FLOW_NATS_CREDS`)
	})
}

func TestRedact(t *testing.T) {
	require.Equal(t, "nats://ann:redacted@a:4222,nats://b:4222,nats://redacted@c:4222",
		redact("nats://ann:secret@a:4222,nats://b:4222,nats://tok@c:4222"))
}
