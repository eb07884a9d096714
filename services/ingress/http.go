package ingress

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/httpserve"
)

//go:embed openapi.json
var openAPI []byte

// routes is the ingress's mux; it keeps the pattern of each route, which the OpenAPI document
// must describe.
type routes struct {
	*http.ServeMux
	patterns []string
}

func (m *routes) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.HandleFunc(pattern, h)
}

func (m *routes) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

func (s *Service) serveHTTP() error {
	h, _ := s.httpHandler()
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("ingress: listening on %s (set FLOW_INGRESS_HTTP_ADDR, or \"off\"): %w", s.cfg.HTTPAddr, err)
	}
	s.httpAddr = ln.Addr()
	s.httpSrv, ln = httpserve.New(ln, h, s.cfg.HTTP)
	go func() {
		if err := s.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("ingress HTTP server stopped", "error", err)
		}
	}()
	return nil
}

// httpHandler returns the HTTP routes behind their guard (http_guard.go), and the mux.
func (s *Service) httpHandler() (http.Handler, *routes) {
	mux := &routes{ServeMux: http.NewServeMux()}
	route := func(pattern string, kind api.InputKind, authed bool, names func(*http.Request, *input)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if authed && !s.authorized(w, r) {
				return
			}
			resp := s.applyHTTP(w, r, kind, names)
			if resp == nil {
				return
			}
			status := http.StatusAccepted
			if kind == api.KindStart {
				status = http.StatusOK
				if resp.Created {
					status = http.StatusCreated
				}
			}
			writeJSON(w, status, resp)
		})
	}
	route("POST /v1/workflows/{definition}/runs", api.KindStart, true, func(r *http.Request, in *input) { in.definition = r.PathValue("definition") })
	route("POST /v1/runs/{run}/signals/{name}", api.KindSignal, true, func(r *http.Request, in *input) {
		in.runID, in.name = r.PathValue("run"), r.PathValue("name")
	})
	route(hookPattern, api.KindHook, false, func(r *http.Request, in *input) { in.token = r.PathValue("token") })
	route("POST /v1/runs/{run}/cancel", api.KindCancel, true, func(r *http.Request, in *input) { in.runID = r.PathValue("run") })
	route("POST /v1/runs/{run}/terminate", api.KindTerminate, true, func(r *http.Request, in *input) { in.runID = r.PathValue("run") })
	s.queryRoutes(mux)
	s.updateRoutes(mux)
	s.resetRoutes(mux)
	s.scheduleRoutes(mux)
	s.batchRoutes(mux)
	s.pauseRoutes(mux, route)
	mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPI)
	})
	// The probes and metrics need no token.
	mux.Handle("GET /healthz", health.Live(nil))
	health.Mount(mux.ServeMux, s.Ready)
	mux.patterns = append(mux.patterns, "GET /readyz", "GET /metrics")
	mux.ServeMux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &api.IngressError{Code: api.CodeRouteNotFound, Message: fmt.Sprintf("no route %s %s; the routes are described at GET /v1/openapi.json", r.Method, r.URL.Path)})
	})
	return traceHTTP(s.guard(mux.ServeMux, methodNotAllowedAsJSON(mux.ServeMux))), mux
}

// applyHTTP applies the input of kind from r, names reading its run, definition, name or token
// from r's path; on an error it answers it on w and returns nil.
func (s *Service) applyHTTP(w http.ResponseWriter, r *http.Request, kind api.InputKind, names func(*http.Request, *input)) *api.InputResponse {
	tagHTTPSpan(r, kind)
	in := &input{kind: kind}
	names(r, in)
	resp, e := s.httpInput(r, in)
	endSpan(r.Context(), resp, e)
	if e != nil {
		writeError(w, e)
		return nil
	}
	return resp
}

// httpInput reads the body of r (a CloudEvent in binary or structured mode, or plain JSON) into
// in and applies it.
func (s *Service) httpInput(r *http.Request, in *input) (*api.InputResponse, *api.IngressError) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, s.cfg.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, &api.IngressError{Code: api.CodeTooLarge, Message: fmt.Sprintf("the body is over the limit of %d bytes (FLOW_INGRESS_MAX_BODY_BYTES); keep large payloads elsewhere and send a reference", s.cfg.MaxBodyBytes)}
	}
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("reading the body: %v", err)}
	}
	ct := r.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	msg := cehttp.NewMessage(r.Header, io.NopCloser(bytes.NewReader(body)))
	enc := msg.ReadEncoding()
	switch {
	case mt == cloudEventsBatch:
		return nil, &api.IngressError{Code: api.CodeMediaType, Message: "batched CloudEvents are not accepted; send one event per request"}
	case enc == binding.EncodingUnknown && (r.Header.Get("ce-specversion") != "" || mt == cloudEventsJSON):
		return nil, &api.IngressError{Code: api.CodeInvalidEvent, Message: fmt.Sprintf("the CloudEvent's specversion %s is not supported; send specversion 1.0", specVersion(r.Header, body))}
	case enc != binding.EncodingUnknown:
		ev, err := binding.ToEvent(r.Context(), msg)
		if err != nil {
			return nil, &api.IngressError{Code: api.CodeInvalidEvent, Message: fmt.Sprintf("the request is not a readable CloudEvent: %v", err)}
		}
		if e := fromEvent(in, ev); e != nil {
			return nil, e
		}
	case len(bytes.TrimSpace(body)) > 0 && !jsonMediaType(ct), len(bytes.TrimSpace(body)) > 0 && ct == "":
		return nil, &api.IngressError{Code: api.CodeMediaType, Message: fmt.Sprintf("Content-Type %q is not JSON; send 'Content-Type: application/json', or a CloudEvent", ct)}
	default:
		if e := fromPlain(in, body, r.Header.Get(api.HeaderIdempotencyKey)); e != nil {
			return nil, e
		}
	}
	in.source = s.httpSource(r, in)
	ctx, cancel := context.WithTimeout(r.Context(), inputTimeout)
	defer cancel()
	return s.apply(ctx, in)
}

// specVersion quotes the specversion of a CloudEvent in binary mode (its header) or structured
// mode (its body's attribute), for a message.
func specVersion(h http.Header, body []byte) string {
	if v := h.Get("ce-specversion"); v != "" {
		return strconv.Quote(v)
	}
	var probe struct {
		SpecVersion json.RawMessage `json:"specversion"`
	}
	if json.Unmarshal(body, &probe) != nil || probe.SpecVersion == nil {
		return "(none)"
	}
	return string(probe.SpecVersion)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"encoding the reply failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, e *api.IngressError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.HTTPStatus(), e)
}

// methodNotAllowedAsJSON answers a known path with the wrong method with a JSON error, as every
// other refusal (the mux answers it in plain text).
func methodNotAllowedAsJSON(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "/" {
			if allow := probeAllow(mux, r); allow != "" {
				w.Header().Set("Allow", allow)
				writeError(w, &api.IngressError{Code: api.CodeMethodNotAllowed, Message: fmt.Sprintf("%s takes %s, not %s", r.URL.Path, allow, r.Method)})
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// probeAllow returns the method a path is routed for, if another method than r's is.
func probeAllow(mux *http.ServeMux, r *http.Request) string {
	for _, m := range []string{http.MethodPost, http.MethodGet} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			return m
		}
	}
	return ""
}
