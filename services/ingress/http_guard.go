package ingress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/flowrun/flow/internal/api"
)

// The ingress's defences against requests that a web page makes a browser send (CSRF) and
// against DNS rebinding, checked before any route's handler (docs/ingress.md, "Browsers"):
//
//   - Host: without bearer tokens, on a loopback address, a request must be addressed to a
//     loopback name or address (localhost, 127.0.0.1, [::1]), to the host of
//     Config.PublicURL or to that of a Config.AllowedOrigins entry, else 403 forbidden: a
//     page whose name was rebound to 127.0.0.1 is same-origin for the browser, but names
//     another host.
//   - A POST, PUT, PATCH or DELETE that a browser marks as cross-site (Sec-Fetch-Site
//     cross-site or same-site) or whose Origin is not the server's own is refused with 403
//     forbidden, unless its Origin is one of Config.AllowedOrigins. A request without those
//     headers (curl, SDKs, servers) passes.
//   - Then the bearer token (401, and the connection is closed).
//   - A POST, PUT or PATCH must say Content-Type application/json (or text/json, or another
//     +json type such as application/cloudevents+json), also when its body is empty, which is
//     then the empty request {}: a page can send text/plain, form types or no type at all
//     without the browser asking the server first, never JSON. A DELETE may have no body and
//     then no type. The body is read whole here, bounded by MaxBodyBytes (413) and by the
//     server's read timeout, and must be UTF-8 (400).
//
// Hook deliveries (POST /v1/hooks/{token}) are exempt from the Origin checks and may be empty
// without a type: third parties' servers send them, and the token in the path is itself the
// secret (a page that knows it could as well post it from its own server), not an ambient
// credential such as a cookie or a bearer token that the browser would add.
const hookPattern = "POST /v1/hooks/{token}"

// authorizedKey marks, in a request's context, that the guard accepted its bearer token.
type authorizedKey struct{}

// guard wraps the routes of mux in the checks above.
func (s *Service) guard(mux *http.ServeMux, next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	for _, o := range s.cfg.AllowedOrigins {
		_ = cop.AddTrustedOrigin(o) // checked by New
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e := s.checkHost(r); e != nil {
			writeError(w, e)
			return
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions {
			next.ServeHTTP(w, r)
			return
		}
		_, pattern := mux.Handler(r)
		// The mux sets the pattern on the request it gets, a copy below; otelhttp names the span
		// (traceHTTP) after the pattern of the request it handed on, this one.
		r.Pattern = pattern
		if pattern == "/" || pattern == "" {
			next.ServeHTTP(w, r) // no such route: 404 or 405
			return
		}
		hook := pattern == hookPattern
		if !hook {
			if err := cop.Check(r); err != nil {
				writeError(w, &api.IngressError{Code: api.CodeForbidden, Message: crossSiteMessage(r)})
				return
			}
			if !s.authorized(w, r) {
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), authorizedKey{}, true))
		}
		body, e := s.readBody(w, r)
		if e != nil {
			writeError(w, e)
			return
		}
		if e := checkMediaType(r, body, hook); e != nil {
			writeError(w, e)
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(w, r)
	})
}

func crossSiteMessage(r *http.Request) string {
	from := r.Header.Get("Origin")
	if from == "" {
		from = "Sec-Fetch-Site: " + r.Header.Get("Sec-Fetch-Site")
	}
	return fmt.Sprintf("a cross-site request (%s) may not change anything here: a web page cannot drive the ingress; call it from a server or the CLI, or add the page's origin to FLOW_INGRESS_ALLOWED_ORIGINS", from)
}

// readBody reads r's whole body, bounded by MaxBodyBytes, and checks that it is UTF-8.
func (s *Service) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *api.IngressError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooLarge):
		return nil, &api.IngressError{Code: api.CodeTooLarge, Message: fmt.Sprintf("the body is over the limit of %d bytes (FLOW_INGRESS_MAX_BODY_BYTES); keep large payloads elsewhere and send a reference", s.cfg.MaxBodyBytes)}
	case errors.As(err, &ne) && ne.Timeout():
		return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("the body did not arrive within %s (FLOW_INGRESS_HTTP_READ_TIMEOUT); send it at once", s.cfg.HTTP.WithDefaults().ReadTimeout)}
	case err != nil:
		return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("reading the body: %v", err)}
	}
	if e := checkUTF8(body, "the body"); e != nil {
		return nil, e
	}
	return body, nil
}

// checkUTF8 refuses JSON text that is not UTF-8, which encoding/json would take and store as
// is (RFC 8259 section 8.1); what names the text in the message.
func checkUTF8(b []byte, what string) *api.IngressError {
	if utf8.Valid(b) {
		return nil
	}
	at := 0
	for at < len(b) {
		r, n := utf8.DecodeRune(b[at:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		at += n
	}
	return &api.IngressError{Code: api.CodeInvalidJSON, Message: fmt.Sprintf("%s is not valid UTF-8 (byte %d is 0x%02x); JSON must be UTF-8 encoded", what, at, b[at])}
}

// checkMediaType requires a JSON content type of a request that changes something (see guard).
func checkMediaType(r *http.Request, body []byte, hook bool) *api.IngressError {
	ct := r.Header.Get("Content-Type")
	empty := len(bytes.TrimSpace(body)) == 0
	if ct == "" {
		if empty && (hook || r.Method == http.MethodDelete) {
			return nil
		}
		if empty {
			return &api.IngressError{Code: api.CodeMediaType, Message: fmt.Sprintf("%s %s needs 'Content-Type: application/json', also with an empty body (which means {}): the ingress refuses what a web page could send without the browser asking first", r.Method, r.URL.Path)}
		}
		return &api.IngressError{Code: api.CodeMediaType, Message: "the body has no Content-Type; send 'Content-Type: application/json', or a CloudEvent"}
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == cloudEventsBatch {
		return nil // the route says why it refuses a batch
	}
	if !jsonMediaType(ct) {
		return &api.IngressError{Code: api.CodeMediaType, Message: fmt.Sprintf("Content-Type %q is not JSON; send 'Content-Type: application/json', or a CloudEvent", ct)}
	}
	return nil
}

// checkHost refuses, when no token protects the routes and they listen on a loopback address,
// a request addressed to a host that is not this one (DNS rebinding).
func (s *Service) checkHost(r *http.Request) *api.IngressError {
	if s.auth.enabled() || !loopback(s.cfg.HTTPAddr) || r.Host == "" {
		return nil
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	for _, u := range append([]string{s.cfg.PublicURL}, s.cfg.AllowedOrigins...) {
		if p, err := url.Parse(u); err == nil && u != "" && strings.EqualFold(p.Hostname(), host) {
			return nil
		}
	}
	return &api.IngressError{Code: api.CodeForbidden, Message: fmt.Sprintf("the request is addressed to host %q, which this ingress does not serve: without bearer tokens it answers only requests to localhost, 127.0.0.1 or [::1] (a page whose name was rebound to this machine must not reach it); add the name with FLOW_INGRESS_PUBLIC_URL or FLOW_INGRESS_ALLOWED_ORIGINS, or set FLOW_INGRESS_TOKENS", r.Host)}
}

// checkAllowedOrigins returns an error unless each origin is scheme://host[:port].
func checkAllowedOrigins(origins []string) error {
	cop := http.NewCrossOriginProtection()
	for _, o := range origins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			return fmt.Errorf("ingress: AllowedOrigins (FLOW_INGRESS_ALLOWED_ORIGINS): %w; write each as scheme://host[:port], e.g. https://ops.example.com", err)
		}
	}
	return nil
}
