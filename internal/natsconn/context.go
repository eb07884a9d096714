package natsconn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// A NATS context is what `nats context add NAME ...` writes: a JSON file
// $XDG_CONFIG_HOME/nats/context/NAME.json, XDG_CONFIG_HOME defaulting to ~/.config. The name of
// the context the nats CLI uses when told none, written by `nats context select NAME`, is in
// $XDG_CONFIG_HOME/nats/context.txt. This file reads both, as the nats CLI (jsm.go's
// natscontext package) does, without depending on it.

// contextFile holds the fields of a context file Flow uses or refuses; the others (description,
// color_scheme, jetstream_event_prefix) concern only the nats CLI and are ignored.
type contextFile struct {
	URL         string `json:"url"`
	Token       string `json:"token"`
	User        string `json:"user"`
	Password    string `json:"password"`
	Creds       string `json:"creds"`
	NKey        string `json:"nkey"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
	TLSFirst    bool   `json:"tls_first"`
	InboxPrefix string `json:"inbox_prefix"`

	// Unsupported: a context setting any of these is refused rather than half applied.
	NSC         string `json:"nsc"`
	UserJWT     string `json:"user_jwt"`
	SocksProxy  string `json:"socks_proxy"`
	JSDomain    string `json:"jetstream_domain"`
	JSAPIPrefix string `json:"jetstream_api_prefix"`
}

// contextRef names the context to load: by name (and where the name came from), or the one the
// nats CLI selected.
type contextRef struct {
	name     string
	source   string
	selected bool
}

// natsContext is a loaded context file.
type natsContext struct {
	name string
	file string // its path
	contextFile
}

// configDir is the nats CLI's configuration directory: $XDG_CONFIG_HOME/nats, or
// ~/.config/nats.
func configDir() (string, error) {
	if dir := os.Getenv("XDG_CONFIG_HOME"); dir != "" {
		return filepath.Join(dir, "nats"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("flow: finding the NATS contexts: %w; set XDG_CONFIG_HOME or HOME", err)
	}
	return filepath.Join(home, ".config", "nats"), nil
}

// loadContext loads the context ref names. It returns nil, and no error, when ref asks for the
// selected context and the nats CLI selected none.
func loadContext(ref contextRef) (*natsContext, error) {
	dir, err := configDir()
	if err != nil {
		if ref.selected {
			return nil, nil // no home: no selected context either
		}
		return nil, err
	}
	if ref.selected {
		txt := filepath.Join(dir, "context.txt")
		data, err := os.ReadFile(txt)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("flow: reading the selected NATS context: %w", err)
		}
		if ref.name = strings.TrimSpace(string(data)); ref.name == "" {
			return nil, nil
		}
		ref.source = "selected in " + txt
	}
	ctxDir := filepath.Join(dir, "context")
	if ref.name == "" || strings.Contains(ref.name, "..") || strings.ContainsAny(ref.name, `/\`) {
		return nil, fmt.Errorf("flow: NATS context name %q (from %s) is not valid: give the name of a file in %s without .json", ref.name, ref.source, ctxDir)
	}
	path := filepath.Join(ctxDir, ref.name+".json")
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		known := knownContexts(ctxDir)
		have := "there are none"
		if len(known) > 0 {
			have = "known: " + strings.Join(known, ", ")
		}
		return nil, fmt.Errorf("flow: unknown NATS context %q (from %s): no file %s (%s); create it with `nats context add %s --server URL`, or name another",
			ref.name, ref.source, path, have, ref.name)
	case err != nil:
		return nil, fmt.Errorf("flow: reading NATS context %q (from %s): %w", ref.name, ref.source, err)
	}
	c := &natsContext{name: ref.name, file: path}
	if err := json.Unmarshal(bytes.TrimSpace(data), &c.contextFile); err != nil {
		return nil, fmt.Errorf("flow: NATS context %q (%s) is not a valid context file: %v; fix it, or recreate it with `nats context add`", ref.name, path, err)
	}
	for _, kv := range [][2]string{{"nsc", c.NSC}, {"user_jwt", c.UserJWT}, {"socks_proxy", c.SocksProxy},
		{"jetstream_domain", c.JSDomain}, {"jetstream_api_prefix", c.JSAPIPrefix}} {
		if key, v := kv[0], kv[1]; v != "" {
			return nil, fmt.Errorf("flow: NATS context %q (%s) sets %s, which Flow does not support; use a context without it, or connect with FLOW_NATS_URL and FLOW_NATS_CREDS",
				ref.name, path, key)
		}
	}
	return c, nil
}

// knownContexts lists the contexts in dir, sorted.
func knownContexts(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// describe names a key of the context, for errors.
func (c *natsContext) describe(key string) string {
	return fmt.Sprintf("%s in NATS context %q (%s)", key, c.name, c.file)
}

// path expands a leading ~ of a file path in the context, as the nats CLI does. A nil context
// returns p.
func (c *natsContext) path(p string) string {
	if c == nil || (p != "~" && !strings.HasPrefix(p, "~/")) {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return p
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~"))
}
