package ingress

import (
	"fmt"
	"net/http"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/bearer"
)

// authenticator checks bearer tokens: those configured, and those of a file read again when it
// changes (bearer.Set). Safe for concurrent use.
type authenticator struct{ set *bearer.Set }

func newAuthenticator(tokens []string, file string) (*authenticator, error) {
	set, err := bearer.New(tokens, file)
	if err != nil {
		return nil, fmt.Errorf("ingress: %w", err)
	}
	return &authenticator{set: set}, nil
}

// enabled reports whether HTTP requests must carry a bearer token.
func (a *authenticator) enabled() bool { return a.set.Enabled() }

// check returns "" when header (an Authorization header) carries an accepted token, else what
// is wrong with it.
func (a *authenticator) check(header string) string {
	if !a.enabled() {
		return ""
	}
	if header == "" {
		return "this route needs a bearer token: send the header 'Authorization: Bearer <token>' with a token from FLOW_INGRESS_TOKENS"
	}
	token, why := bearer.FromHeader(header)
	if why != "" {
		return why
	}
	if _, ok := a.set.Match(token); !ok {
		return "the bearer token is not accepted; check FLOW_INGRESS_TOKENS (or the tokens file) on the ingress"
	}
	return ""
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
