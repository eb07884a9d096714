package cli

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/flowrun/flow/services/history"
)

// devTokenFile is the name, in flow dev's data directory, of the bearer token it generates.
const devTokenFile = "token"

// devAuth is the bearer tokens `flow dev` gives its ingress and history service: those of the
// environment (FLOW_INGRESS_TOKENS, FLOW_INGRESS_TOKENS_FILE, FLOW_READ_TOKENS,
// FLOW_READ_TOKENS_FILE, as the history service's Config reads them); else, unless insecure, one
// generated at first start and kept in <dir>/token (mode 0600); else none.
type devAuth struct {
	tokens, readTokens         []string
	tokensFile, readTokensFile string
	// file is the generated token's file, and fresh is set when this start wrote it.
	file  string
	fresh bool
	// insecure is set when no token is required (--insecure).
	insecure bool
}

// devAuthFor returns the tokens of a flow dev with data directory dir, given the history
// service's configuration as the environment sets it.
func devAuthFor(dir string, insecure bool, env history.Config) (devAuth, error) {
	a := devAuth{tokens: env.Tokens, tokensFile: env.TokensFile, readTokens: env.ReadTokens, readTokensFile: env.ReadTokensFile}
	if len(a.tokens) > 0 || a.tokensFile != "" {
		return a, nil
	}
	if insecure {
		a.insecure = true
		return a, nil
	}
	a.file = filepath.Join(dir, devTokenFile)
	token, fresh, err := devToken(a.file)
	if err != nil {
		return a, err
	}
	a.tokens, a.fresh = []string{token}, fresh
	return a, nil
}

// devToken reads the token of file, creating the file (mode 0600) with a random token when
// there is none; fresh says it did.
func devToken(file string) (token string, fresh bool, err error) {
	b, err := os.ReadFile(file)
	if err == nil {
		if token = strings.TrimSpace(string(b)); token == "" {
			return "", false, fmt.Errorf("the token file %s is empty: delete it for flow dev to write a new token, or write one in it", file)
		}
		if fi, err := os.Stat(file); err == nil && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(file, 0o600); err != nil {
				return "", false, fmt.Errorf("the token file %s is readable by others (%s) and could not be restricted: %w", file, fi.Mode().Perm(), err)
			}
		}
		return token, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("reading the token file: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return "", false, fmt.Errorf("creating the data directory: %w", err)
	}
	token = "flow_" + rand.Text() // 130 random bits
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("writing the token file: %w", err)
	}
	if _, err := f.WriteString(token + "\n"); err != nil {
		_ = f.Close()
		return "", false, fmt.Errorf("writing the token file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", false, fmt.Errorf("writing the token file: %w", err)
	}
	return token, true, nil
}

// text says, for flow dev's banner, how the HTTP APIs are protected.
func (a devAuth) text(historyURL string) string {
	login := ""
	if historyURL != "" {
		login = "; sign in to the web UI at " + historyURL + "/ui/login with it"
	}
	switch {
	case a.insecure:
		return "none (--insecure): any local program, and any web page open in a browser, may act through the HTTP APIs"
	case a.file == "":
		return "from FLOW_INGRESS_TOKENS / FLOW_INGRESS_TOKENS_FILE" + login
	case a.fresh:
		return fmt.Sprintf("%s\n             written to %s (mode 0600) and shown this once. Send it as the header\n             'Authorization: Bearer <token>' to the HTTP APIs%s.\n             The flow commands talk NATS and need none; those that read over HTTP\n             (flow status --secrets) find it there, or in FLOW_TOKEN.", a.tokens[0], a.file, login)
	}
	return fmt.Sprintf("in %s (the HTTP APIs need it as 'Authorization: Bearer <token>'%s)", a.file, login)
}
