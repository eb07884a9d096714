package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/httpserve"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// maxConcurrentQueries bounds the queries answered at once over NATS.
const maxConcurrentQueries = 64

// queryTimeout bounds one query.
const queryTimeout = 30 * time.Second

// serve starts the micro service and the HTTP API.
func (s *Service) serve() error {
	svc, err := micro.AddService(s.nc, micro.Config{Name: "flow-history", Version: "1.0.0",
		Description: "Flow's history service: run snapshots (at any sequence), history pages, listings, resume; start keys, hook claims and parks"})
	if err != nil {
		return fmt.Errorf("starting the query service: %w", err)
	}
	s.micro = svc
	slots := make(chan struct{}, maxConcurrentQueries)
	for subject, fn := range map[string]func(context.Context, []byte) (any, error){
		// flow.api.* serves a run's secrets redacted; the secrets subjects, which the deployed
		// permissions grant no role, reveal them (redact.go).
		api.SubjectGet:            handle(s.redactedGet),
		api.SubjectHistory:        handle(s.redactedHistory),
		api.SubjectSecretsGet:     handle(s.getRun),
		api.SubjectSecretsHistory: handle(s.historyPage),
		api.SubjectList: handle(func(_ context.Context, req api.ListRequest) (*api.ListResponse, error) {
			resp, err := s.listRuns(req, nil)
			return &resp, err
		}),
		api.SubjectResume:          handle(s.resume),
		api.SubjectDefinitions:     handle(s.listDefinitions),
		api.SubjectPayload:         handle(s.getPayload),
		api.SubjectStartKeyClaim:   handle(s.claimStartKey),
		api.SubjectStartKeyReplace: handle(s.replaceStartKey),
		api.SubjectStartKeyRelease: handle(s.releaseStartKey),
	} {
		name := strings.ReplaceAll(strings.TrimPrefix(strings.TrimPrefix(subject, "flow.api."), "runs."), ".", "_")
		if err := s.addEndpoint(svc, name, subject, slots, queryTimeout, "", fn); err != nil {
			return err
		}
	}
	// Awaits are long polls: they hold no query slot, only their own goroutine.
	awaits := make(chan struct{}, maxAwaits)
	if err := s.addEndpoint(svc, "await", api.SubjectAwait, awaits, api.MaxAwait+5*time.Second,
		fmt.Sprintf("%d awaits are held already; retry", maxAwaits), handle(s.await)); err != nil {
		return err
	}
	if err := s.serveUpdates(svc); err != nil {
		return err
	}
	if err := s.serveDoors(svc); err != nil {
		return err
	}
	// Answer once Start returns: the server has the endpoints' subscriptions after a round trip.
	if err := s.nc.FlushTimeout(10 * time.Second); err != nil {
		return fmt.Errorf("subscribing the query endpoints: %w", err)
	}
	if s.cfg.HTTPAddr == "off" {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("history: listening on %s for the HTTP API: %w (set FLOW_HISTORY_HTTP_ADDR to another address, or \"off\")", s.cfg.HTTPAddr, err)
	}
	s.httpAddr = ln.Addr()
	if !s.auth.enabled() {
		s.logger.Warn("no bearer tokens configured: the HTTP API and the web UI (with its actions) answer anyone who reaches " + s.httpAddr.String() + "; set FLOW_INGRESS_TOKENS (and FLOW_READ_TOKENS) to require one")
	}
	s.httpSrv, ln = httpserve.New(ln, s.routes(), s.cfg.HTTP)
	s.workers.Go(func() {
		if err := s.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("the HTTP API stopped", slog.String("error", err.Error()))
		}
	})
	return nil
}

// addEndpoint adds endpoint name on subject to svc. Each request is answered by a goroutine of
// its own on the reply subject, not through the request after the handler returned (micro reads
// the request's error then, for its statistics); the goroutine holds one of slots while fn runs
// with a context that ends after timeout. A request that finds every slot taken waits for one
// when busy is "", and is otherwise refused at once as unavailable with the message busy.
func (s *Service) addEndpoint(svc micro.Service, name, subject string, slots chan struct{}, timeout time.Duration, busy string,
	fn func(context.Context, []byte) (any, error),
) error {
	err := svc.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) {
		if busy == "" {
			slots <- struct{}{}
		} else {
			select {
			case slots <- struct{}{}:
			default:
				_ = r.Error(string(api.CodeUnavailable), busy, nil)
				return
			}
		}
		reply, data := r.Reply(), r.Data()
		go func() {
			defer func() { <-slots }()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			resp, err := fn(ctx, data)
			s.reply(reply, resp, err)
		}()
	}), micro.WithEndpointSubject(subject))
	if err != nil {
		return fmt.Errorf("adding the %s endpoint: %w", subject, err)
	}
	return nil
}

// handle adapts a typed query to a NATS endpoint: JSON request in, response out.
func handle[Req, Resp any](fn func(context.Context, Req) (Resp, error)) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		var req Req
		if len(data) > 0 {
			if err := json.Unmarshal(data, &req); err != nil {
				return nil, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("the request is not valid JSON for %T: %v", req, err)}
			}
		}
		return fn(ctx, req)
	}
}

// reply answers a request of the micro service from the goroutine that computed resp (or err),
// after the endpoint's handler returned: it publishes to the request's reply subject itself, as
// micro.Request's Respond would (an error is an empty body with micro's error headers), because
// the service reads the micro.Request for its statistics once the handler returned, and
// answering through it then is a data race. A request without a reply subject is not answered.
func (s *Service) reply(subject string, resp any, err error) {
	if subject == "" {
		return
	}
	msg := nats.NewMsg(subject)
	if err == nil {
		msg.Data, err = json.Marshal(resp)
	}
	if err != nil {
		e := s.apiError(err)
		msg.Data = nil
		msg.Header.Set(micro.ErrorCodeHeader, string(e.Code))
		msg.Header.Set(micro.ErrorHeader, e.Message)
	}
	if err := s.nc.PublishMsg(msg); err != nil {
		s.logger.Warn("an answer was not sent", slog.String("subject", subject), slog.String("error", err.Error()))
	}
}

// apiError turns a query's error into the reply's code and message.
func (s *Service) apiError(err error) *api.Error {
	var e *api.Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, event.ErrInvalidID):
		return &api.Error{Code: api.CodeInvalid, Message: err.Error()}
	case errors.As(err, new(*deletedErr)):
		return &api.Error{Code: api.CodeDeleted, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &api.Error{Code: api.CodeUnavailable, Message: "the query took too long: " + err.Error()}
	}
	s.logger.Error("query failed", slog.String("error", err.Error()))
	return &api.Error{Code: api.CodeInternal, Message: err.Error()}
}

// routes is the HTTP API (see package internal/api).
func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "runs": s.index.len(), "applied": s.Applied()})
	})
	health.Mount(mux, s.Ready) // GET /readyz, GET /metrics
	mux.HandleFunc("GET /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		req, err := listRequest(r)
		if err == nil {
			var resp api.ListResponse
			if resp, err = s.listRuns(req, nil); err == nil {
				writeJSON(w, http.StatusOK, resp)
				return
			}
		}
		s.writeError(w, err)
	})
	// A run's snapshot and history serve its secrets redacted, unless a full caller asks
	// ?reveal=secrets (redact.go, httpauth.go).
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		req := api.GetRequest{RunID: r.PathValue("id")}
		err := uints(r, map[string]*uint64{"at": &req.At, "at_least": &req.AtLeast})
		serveRevealed(s, w, r, req, err, s.getRun, s.redactedGet)
	})
	mux.HandleFunc("GET /v1/runs/{id}/history", func(w http.ResponseWriter, r *http.Request) {
		req := api.HistoryRequest{RunID: r.PathValue("id")}
		var limit uint64
		err := uints(r, map[string]*uint64{"after": &req.After, "at_least": &req.AtLeast, "limit": &limit})
		req.Limit = int(min(limit, api.MaxHistoryLimit+1))
		serveRevealed(s, w, r, req, err, s.historyPage, s.redactedHistory)
	})
	mux.HandleFunc("GET /v1/runs/{id}/watch", s.watch)
	mux.HandleFunc("GET /v1/definitions", func(w http.ResponseWriter, r *http.Request) {
		resp, _ := s.listDefinitions(r.Context(), api.DefinitionsRequest{Queue: r.URL.Query().Get("queue")})
		writeJSON(w, http.StatusOK, resp)
	})
	mux.HandleFunc("POST /v1/runs/{id}/resume", func(w http.ResponseWriter, r *http.Request) {
		var req api.ResumeRequest
		if r.ContentLength != 0 {
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
				s.writeError(w, &api.Error{Code: api.CodeInvalid, Message: "the body is not a JSON resume request: " + err.Error()})
				return
			}
		}
		req.RunID = r.PathValue("id")
		resp, err := s.resume(r.Context(), req)
		if err != nil {
			s.writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	})
	s.mountUI(mux)
	return s.authMiddleware(mux)
}

// watch streams a run's events as server-sent events, from ?after= on, until the run ends or
// the client goes away.
func (s *Service) watch(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("id")
	var after uint64
	if err := uints(r, map[string]*uint64{"after": &after}); err != nil {
		s.writeError(w, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		s.writeError(w, fmt.Errorf("the connection cannot stream"))
		return
	}
	wake := make(chan struct{}, 1)
	stop, err := s.store.Follow(runID, func(store.Commit) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		s.writeError(w, &api.Error{Code: api.CodeInvalid, Message: err.Error()})
		return
	}
	defer stop()
	revealed, err := reveal(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	var secrets []string
	if !revealed {
		secrets = s.runSecrets(r.Context(), runID, after)
	}
	started := false
	for {
		hist, err := s.history(r.Context(), runID, after, 0)
		if err != nil {
			if !started {
				s.writeError(w, err)
			}
			return
		}
		if !revealed {
			secrets = append(secrets, eventSecrets(hist)...)
			hist = redactEvents(hist)
		}
		if !started {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		for _, e := range hist {
			b, err := json.Marshal(e)
			if err != nil {
				return
			}
			b = scrub(b, secrets)
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type(), b); err != nil {
				return
			}
			after = e.Seq
			if e.Type().Terminal() {
				flusher.Flush()
				return
			}
		}
		flusher.Flush()
		poll := time.NewTimer(time.Second)
		select {
		case <-wake:
		case <-poll.C:
		case <-r.Context().Done():
			poll.Stop()
			return
		}
		poll.Stop()
	}
}

// listRequest reads a listing's filters from the query string.
func listRequest(r *http.Request) (api.ListRequest, error) {
	q := r.URL.Query()
	req := api.ListRequest{Definition: q.Get("definition"), Queue: q.Get("queue"), Build: q.Get("build"), Parent: q.Get("parent"),
		Cursor: q.Get("cursor"), Parked: q.Get("parked") == "true", Where: q.Get("where"), IncludeDeleted: q.Get("include_deleted") == "true"}
	for _, st := range q["status"] {
		for _, one := range strings.Split(st, ",") {
			if one != "" { // "status=" (the UI form's "any") filters nothing
				req.Status = append(req.Status, one)
			}
		}
	}
	for name, t := range map[string]*time.Time{"since": &req.Since, "until": &req.Until} {
		if v := q.Get(name); v != "" {
			var err error
			if *t, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return req, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("%s must be an RFC 3339 time such as 2026-12-01T09:00:00Z, got %q", name, v)}
			}
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return req, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("limit must be a number, got %q", v)}
		}
		req.Limit = n
	}
	return req, nil
}

// uints reads unsigned query parameters.
func uints(r *http.Request, into map[string]*uint64) error {
	for name, p := range into {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("%s must be a non-negative number, got %q", name, v)}
		}
		*p = n
	}
	return nil
}

// serveRevealed answers a read of req: with full's answer when the caller asks ?reveal=secrets
// (reveal), else with redacted's. err is the error parsing the request left, answered as is.
func serveRevealed[Req, Full any](s *Service, w http.ResponseWriter, r *http.Request, req Req, err error,
	full func(context.Context, Req) (Full, error), redacted func(context.Context, Req) (json.RawMessage, error)) {
	var revealed bool
	if err == nil {
		revealed, err = reveal(r)
	}
	if err == nil {
		var resp any
		if revealed {
			resp, err = full(r.Context(), req)
		} else {
			resp, err = redacted(r.Context(), req)
		}
		if err == nil {
			writeJSON(w, http.StatusOK, resp)
			return
		}
	}
	s.writeError(w, err)
}

func (s *Service) writeError(w http.ResponseWriter, err error) {
	e := s.apiError(err)
	status, _ := strconv.Atoi(string(e.Code))
	writeJSON(w, status, map[string]*api.Error{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
