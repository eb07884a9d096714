package ingress

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/flowrun/flow/internal/api"
)

// authenticator checks bearer tokens: those configured, and those of a file read again when its
// modification time or size changes (at most once per fileCheckEvery). Safe for concurrent use.
type authenticator struct {
	static []string
	file   string

	mu        sync.Mutex
	fromFile  []string
	modTime   time.Time
	size      int64
	checkedAt time.Time
}

const fileCheckEvery = 2 * time.Second

func newAuthenticator(tokens []string, file string) (*authenticator, error) {
	a := &authenticator{file: file}
	for _, t := range tokens {
		if t = strings.TrimSpace(t); t != "" {
			a.static = append(a.static, t)
		}
	}
	if file != "" {
		if err := a.reload(time.Now()); err != nil {
			return nil, err
		}
		if len(a.fromFile) == 0 && len(a.static) == 0 {
			return nil, fmt.Errorf("ingress: tokens file %s holds no token; write one token per line", file)
		}
	}
	return a, nil
}

// enabled reports whether HTTP requests must carry a bearer token.
func (a *authenticator) enabled() bool { return len(a.static) > 0 || a.file != "" }

// check returns "" when header (an Authorization header) carries an accepted token, else what
// is wrong with it.
func (a *authenticator) check(header string) string {
	if !a.enabled() {
		return ""
	}
	if header == "" {
		return "this route needs a bearer token: send the header 'Authorization: Bearer <token>' with a token from FLOW_INGRESS_TOKENS"
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "the Authorization header is not 'Bearer <token>'"
	}
	token = strings.TrimSpace(token)
	for _, t := range a.tokens() {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			return ""
		}
	}
	return "the bearer token is not accepted; check FLOW_INGRESS_TOKENS (or the tokens file) on the ingress"
}

func (a *authenticator) tokens() []string {
	if a.file == "" {
		return a.static
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if now := time.Now(); now.Sub(a.checkedAt) >= fileCheckEvery {
		_ = a.reload(now) // a file being replaced keeps the tokens read before
	}
	return append(append([]string(nil), a.static...), a.fromFile...)
}

// reload reads the tokens file if it changed. Callers hold mu, or own a.
func (a *authenticator) reload(now time.Time) error {
	a.checkedAt = now
	fi, err := os.Stat(a.file)
	if err != nil {
		return fmt.Errorf("ingress: reading the tokens file: %w", err)
	}
	if fi.ModTime().Equal(a.modTime) && fi.Size() == a.size && a.fromFile != nil {
		return nil
	}
	b, err := os.ReadFile(a.file)
	if err != nil {
		return fmt.Errorf("ingress: reading the tokens file: %w", err)
	}
	var tokens []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			tokens = append(tokens, line)
		}
	}
	a.fromFile, a.modTime, a.size = append([]string{}, tokens...), fi.ModTime(), fi.Size()
	return nil
}

// authorized checks the request's bearer token, answering 401 when it fails and closing the
// connection after the answer: a client without a good token keeps no connection open. A
// request whose token the guard accepted already (http_guard.go) is not checked again.
func (s *Service) authorized(w http.ResponseWriter, r *http.Request) bool {
	if ok, _ := r.Context().Value(authorizedKey{}).(bool); ok {
		return true
	}
	if why := s.auth.check(r.Header.Get("Authorization")); why != "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="flow"`)
		w.Header().Set("Connection", "close")
		writeError(w, &api.IngressError{Code: api.CodeUnauthorized, Message: why})
		return false
	}
	return true
}
