package history

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/bearer"
	"github.com/flowrun/flow/services/history/webui"
)

// Who may use the HTTP port (docs/operations.md#the-history-services-http-port):
//
//   - Every request but the probes (/healthz, /readyz, /metrics) must name an allowed Host
//     (Config.AllowedHosts), else 421: a page of another site that a DNS name rebound to this
//     address cannot read the API.
//   - With tokens configured, every request but the probes, the static files and the sign-in
//     page must carry a bearer token (Authorization: Bearer) or a session cookie set by the
//     sign-in page. A full token (Config.Tokens) may read, act and reveal secrets; a read-only
//     one (Config.ReadTokens) may only read. Without tokens every caller is full.
//   - A request that is not a GET or HEAD must come from the same origin (Sec-Fetch-Site,
//     Origin: http.CrossOriginProtection), and from a full caller; a web UI form or script
//     authenticated by the session cookie (or anonymous) must also carry the page's CSRF token
//     (the form field "csrf" or the header X-Flow-CSRF).
//
// The session cookie holds an expiry and an HMAC of it keyed by the caller's token, never the
// token: every replica checks it against the configured tokens, and removing a token ends its
// sessions. It is HttpOnly, SameSite=Strict, and Secure when the request came over TLS.

// access is what a caller may do.
type access int

const (
	accessNone access = iota
	accessRead
	accessFull
)

// caller is an authenticated HTTP caller.
type caller struct {
	access access
	// token is the caller's bearer token, forwarded to the ingress by the UI's actions; "" for
	// an anonymous caller (no tokens configured).
	token string
	// session is the session cookie's value when the caller was authenticated by it.
	session string
}

type callerKey struct{}

// callerOf returns the caller the middleware authenticated (full when the request did not go
// through it, as in unit tests of handlers).
func callerOf(r *http.Request) caller {
	if c, ok := r.Context().Value(callerKey{}).(caller); ok {
		return c
	}
	return caller{access: accessFull}
}

// sessionCookie names the web UI's session cookie.
const sessionCookie = "flow_session"

// csrfField and csrfHeader carry the CSRF token of the web UI's POSTs.
const (
	csrfField  = "csrf"
	csrfHeader = "X-Flow-CSRF"
)

// defaultSessionTTL is how long a sign-in lasts unless Config.SessionTTL says otherwise.
const defaultSessionTTL = 12 * time.Hour

// DefaultIngressURL is where the web UI forwards its actions unless Config.IngressURL says
// otherwise.
const DefaultIngressURL = "http://127.0.0.1:8421"

// httpAuth checks the HTTP port's callers. Safe for concurrent use.
type httpAuth struct {
	full, read *bearer.Set
	hosts      map[string]bool
	anyHost    bool
	ttl        time.Duration
	// anonKey keys the CSRF token of anonymous callers (no tokens configured): random per
	// process.
	anonKey []byte
	csrf    *http.CrossOriginProtection
}

func newHTTPAuth(cfg *Config) (*httpAuth, error) {
	full, err := bearer.New(cfg.Tokens, cfg.TokensFile)
	if err != nil {
		return nil, fmt.Errorf("history: FLOW_INGRESS_TOKENS_FILE: %w", err)
	}
	read, err := bearer.New(cfg.ReadTokens, cfg.ReadTokensFile)
	if err != nil {
		return nil, fmt.Errorf("history: FLOW_READ_TOKENS_FILE: %w", err)
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = defaultSessionTTL
	}
	if cfg.SessionTTL < 0 {
		return nil, fmt.Errorf("history: SessionTTL must be positive, got %s", cfg.SessionTTL)
	}
	if cfg.IngressURL == "" {
		cfg.IngressURL = DefaultIngressURL
	}
	if cfg.IngressURL != "off" {
		u, err := url.Parse(cfg.IngressURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("history: IngressURL (FLOW_HISTORY_INGRESS_URL) must be an http(s) URL such as http://127.0.0.1:8421, or \"off\", got %q", cfg.IngressURL)
		}
		cfg.IngressURL = strings.TrimRight(cfg.IngressURL, "/")
	}
	a := &httpAuth{full: full, read: read, ttl: cfg.SessionTTL, hosts: map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true},
		anonKey: []byte(rand.Text()), csrf: http.NewCrossOriginProtection()}
	if host, _, err := net.SplitHostPort(cfg.HTTPAddr); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			a.hosts[strings.ToLower(host)] = true
		}
	}
	for _, h := range cfg.AllowedHosts {
		h = strings.ToLower(strings.Trim(strings.TrimSpace(h), "[]"))
		switch h {
		case "":
		case "*":
			a.anyHost = true
		default:
			a.hosts[h] = true
		}
	}
	return a, nil
}

// enabled reports whether callers must authenticate.
func (a *httpAuth) enabled() bool { return a.full.Enabled() || a.read.Enabled() }

// hostAllowed reports whether the Host header hostport names an allowed host.
func (a *httpAuth) hostAllowed(hostport string) bool {
	if a.anyHost {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return a.hosts[strings.ToLower(strings.Trim(host, "[]"))]
}

// token returns the access of bearer token t, and the configured token it matched.
func (a *httpAuth) token(t string) (access, string) {
	if m, ok := a.full.Match(t); ok {
		return accessFull, m
	}
	if m, ok := a.read.Match(t); ok {
		return accessRead, m
	}
	return accessNone, ""
}

// authenticate returns r's caller, or accessNone and why.
func (a *httpAuth) authenticate(r *http.Request) (caller, string) {
	if !a.enabled() {
		return caller{access: accessFull}, ""
	}
	t, why := bearer.FromHeader(r.Header.Get("Authorization"))
	if why != "" {
		return caller{}, why
	}
	if t != "" {
		acc, m := a.token(t)
		if acc == accessNone {
			return caller{}, "the bearer token is not accepted; check FLOW_INGRESS_TOKENS and FLOW_READ_TOKENS (or their files) on the history service"
		}
		return caller{access: acc, token: m}, ""
	}
	if ck, err := r.Cookie(sessionCookie); err == nil {
		if c, ok := a.session(ck.Value, time.Now()); ok {
			return c, ""
		}
		return caller{}, "the web UI session has expired or its token was revoked; sign in again at /ui/login"
	}
	return caller{}, "this route needs a bearer token: send the header 'Authorization: Bearer <token>' with a token from FLOW_INGRESS_TOKENS (or FLOW_READ_TOKENS to read only), or sign in to the web UI at /ui/login"
}

// sessionMAC is the MAC of a session expiring at exp, keyed by token.
func sessionMAC(token string, exp int64) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("flow-ui-session\x00" + strconv.FormatInt(exp, 10)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newSession returns the session cookie's value for token, expiring ttl from now.
func (a *httpAuth) newSession(token string, now time.Time) string {
	exp := now.Add(a.ttl).Unix()
	return strconv.FormatInt(exp, 10) + "." + sessionMAC(token, exp)
}

// session checks a session cookie's value against the configured tokens.
func (a *httpAuth) session(v string, now time.Time) (caller, bool) {
	expText, mac, ok := strings.Cut(v, ".")
	exp, err := strconv.ParseInt(expText, 10, 64)
	if !ok || err != nil || now.Unix() >= exp {
		return caller{}, false
	}
	for _, set := range []struct {
		s   *bearer.Set
		acc access
	}{{a.full, accessFull}, {a.read, accessRead}} {
		for _, t := range set.s.Tokens() {
			if hmac.Equal([]byte(sessionMAC(t, exp)), []byte(mac)) {
				return caller{access: set.acc, token: t, session: v}, true
			}
		}
	}
	return caller{}, false
}

// csrfToken returns the CSRF token of c's pages: "" when c authenticated with a bearer header
// (a browser does not send one by itself, so such requests need none).
func (a *httpAuth) csrfToken(c caller) string {
	key := a.anonKey
	switch {
	case c.session != "":
		key = []byte(c.session)
	case a.enabled():
		return ""
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("flow-ui-csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// isProbe reports whether path is one of the probes, which need neither a token nor a host.
func isProbe(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/metrics"
}

// public reports whether path is served without a token: the probes, the sign-in page and the
// static files.
func public(path string) bool {
	return isProbe(path) || path == "/ui/login" || path == "/ui/logout" || strings.HasPrefix(path, "/ui/static/")
}

// isUI reports whether path is one of the web UI's (answered with pages and redirects).
func isUI(path string) bool { return path == "/" || path == "/ui" || strings.HasPrefix(path, "/ui/") }

// authMiddleware checks the Host, the caller and the origin of every request (see above) before
// next.
func (s *Service) authMiddleware(next http.Handler) http.Handler {
	a := s.auth
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if isProbe(path) {
			next.ServeHTTP(w, r)
			return
		}
		if !a.hostAllowed(r.Host) {
			s.writeError(w, &api.Error{Code: api.CodeMisdirected, Message: fmt.Sprintf("this service does not answer for host %q; add it to FLOW_HISTORY_ALLOWED_HOSTS if it is this service's name", r.Host)})
			return
		}
		safe := r.Method == http.MethodGet || r.Method == http.MethodHead
		if !safe {
			if err := a.csrf.Check(r); err != nil {
				s.writeError(w, &api.Error{Code: api.CodeNotAllowed, Message: "cross-origin request refused: " + err.Error()})
				return
			}
		}
		if public(path) {
			next.ServeHTTP(w, r)
			return
		}
		c, why := a.authenticate(r)
		if c.access == accessNone {
			if isUI(path) && safe {
				http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="flow"`)
			s.writeError(w, &api.Error{Code: api.CodeNoAuth, Message: why})
			return
		}
		if !safe && c.access != accessFull {
			s.writeError(w, &api.Error{Code: api.CodeNotAllowed, Message: "a read-only token may read, not act: use a token of FLOW_INGRESS_TOKENS"})
			return
		}
		if !safe && isUI(path) {
			if want := a.csrfToken(c); want != "" {
				got := r.Header.Get(csrfHeader)
				if got == "" {
					r.Body = http.MaxBytesReader(w, r.Body, webui.MaxActionBody)
					got = r.PostFormValue(csrfField) // a form; a JSON body is not read here
				}
				if !hmac.Equal([]byte(got), []byte(want)) {
					s.writeError(w, &api.Error{Code: api.CodeNotAllowed, Message: "the web UI's CSRF token is missing or wrong: reload the page and try again"})
					return
				}
			}
		}
		if isUI(path) {
			w = &uiWriter{ResponseWriter: w, csrf: a.csrfToken(c), session: c.session != ""}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// reveal reports whether r asks for a run's secrets (?reveal=secrets), refusing with an error a
// caller who may not see them.
func reveal(r *http.Request) (bool, error) {
	v := r.URL.Query().Get("reveal")
	switch v {
	case "":
		return false, nil
	case "secrets":
	default:
		return false, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("reveal must be \"secrets\" (a run's seed and hook tokens), got %q", v)}
	}
	if callerOf(r).access != accessFull {
		return false, &api.Error{Code: api.CodeNotAllowed, Message: "a read-only token may not reveal a run's secrets: use a token of FLOW_INGRESS_TOKENS"}
	}
	return true, nil
}

// uiWriter carries to uiRender what the pages show of the caller: the CSRF token of their
// forms, and whether they signed in (for the sign-out button).
type uiWriter struct {
	http.ResponseWriter
	csrf    string
	session bool
}

// Unwrap lets http.ResponseController reach the connection.
func (w *uiWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
