package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/pauses"
)

// The pause doors (docs/pause.md): a run's pause and unpause are inputs like a cancel
// (run.paused, run.unpaused, deduplicated by delivery ID); a definition's or queue's are
// FLOW_PAUSES entries, written and deleted here.

func isPause(k api.InputKind) bool { return k == api.KindPause || k == api.KindUnpause }

func (in *input) pauseBody(body []byte) *api.IngressError {
	var req api.PauseRequest
	if e := strictJSON(body, &req, `the body of a `+string(in.kind)+` is {"reason": "...", "by": "..."} or empty`); e != nil {
		return e
	}
	in.reason, in.by = req.Reason, req.By
	return nil
}

// applyPause pauses or unpauses in's run.
func (s *Service) applyPause(ctx context.Context, in *input) (string, error) {
	ctx = engine.WithActor(ctx, in.by)
	if in.kind == api.KindPause {
		return s.engine.Pause(ctx, in.runID, in.reason, in.deliveryID)
	}
	return s.engine.Unpause(ctx, in.runID, in.reason, in.deliveryID)
}

// pauseRoutes adds the HTTP pause doors.
func (s *Service) pauseRoutes(mux *routes, route func(string, api.InputKind, bool, func(*http.Request, *input))) {
	route("POST /v1/runs/{run}/pause", api.KindPause, true, func(r *http.Request, in *input) { in.runID = r.PathValue("run") })
	route("POST /v1/runs/{run}/unpause", api.KindUnpause, true, func(r *http.Request, in *input) { in.runID = r.PathValue("run") })
	for _, scope := range []string{pauses.ScopeDefinition, pauses.ScopeQueue} {
		for _, op := range []string{"pause", "unpause"} {
			mux.HandleFunc("POST /v1/"+scope+"s/{name}/"+op, func(w http.ResponseWriter, r *http.Request) {
				if !s.authorized(w, r) {
					return
				}
				var req api.PauseRequest
				body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, s.cfg.MaxBodyBytes))
				if err != nil {
					writeError(w, &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("reading the body: %v", err)})
					return
				}
				if e := strictJSON(body, &req, `the body of a pause or unpause is {"reason": "...", "by": "..."} or empty`); e != nil {
					writeError(w, e)
					return
				}
				resp, e := s.pauseScope(r.Context(), op, scope, r.PathValue("name"), req)
				if e != nil {
					writeError(w, e)
					return
				}
				writeJSON(w, http.StatusOK, resp)
			})
		}
	}
	mux.HandleFunc("GET /v1/pauses", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(w, r) {
			return
		}
		resp, e := s.pauseScope(r.Context(), "list", "", "", api.PauseRequest{})
		if e != nil {
			writeError(w, e)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	})
}

// natsPauses answers a message on flow.ingress.pauses.> and reports whether it was one.
func (s *Service) natsPauses(ctx context.Context, m *nats.Msg) bool {
	rest, ok := strings.CutPrefix(m.Subject, api.SubjectPausesPrefix)
	if !ok {
		return false
	}
	resp, e := s.natsPausesOnce(ctx, rest, m.Data)
	if m.Reply == "" {
		if e != nil {
			s.logger.Warn("pause request rejected", slog.String("subject", m.Subject), slog.String("reason", e.Message))
		}
		return true
	}
	s.reply(m, "a pause request", resp, e)
	return true
}

func (s *Service) natsPausesOnce(ctx context.Context, rest string, body []byte) (*api.PausesResponse, *api.IngressError) {
	if rest == "list" {
		return s.pauseScope(ctx, "list", "", "", api.PauseRequest{})
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 || parts[0] != "pause" && parts[0] != "unpause" {
		return nil, &api.IngressError{Code: api.CodeRouteNotFound, Message: fmt.Sprintf("%s%s is not a pause subject; use %spause.<definition|queue>.<name>, %sunpause.<definition|queue>.<name> or %s",
			api.SubjectPausesPrefix, rest, api.SubjectPausesPrefix, api.SubjectPausesPrefix, api.SubjectPausesList)}
	}
	var req api.PauseRequest
	if e := strictJSON(body, &req, `the body of a pause or unpause is {"reason": "...", "by": "..."} or empty`); e != nil {
		return nil, e
	}
	return s.pauseScope(ctx, parts[0], parts[1], parts[2], req)
}

// pauseScope pauses (op "pause") or unpauses ("unpause") the definition or queue name, or lists
// the pauses (op "list").
func (s *Service) pauseScope(ctx context.Context, op, scope, name string, req api.PauseRequest) (*api.PausesResponse, *api.IngressError) {
	ctx = engine.WithActor(ctx, req.By)
	fail := func(err error) *api.IngressError {
		if errors.Is(err, engine.ErrNoPauses) || errors.Is(err, core.ErrInvalidInput) {
			return &api.IngressError{Code: api.CodeInvalidRequest, Message: trimFlow(err)}
		}
		return &api.IngressError{Code: api.CodeIngressInternal, Message: trimFlow(err)}
	}
	if op != "list" && scope != pauses.ScopeDefinition && scope != pauses.ScopeQueue {
		return nil, &api.IngressError{Code: api.CodeInvalidName, Message: fmt.Sprintf("%q is not a pause scope; pause a definition or a queue", scope)}
	}
	if op != "list" {
		if e := checkKeyName(scope, name); e != nil {
			return nil, e
		}
	}
	resp := &api.PausesResponse{Pauses: []api.ScopePause{}}
	switch op {
	case "pause":
		var p pauses.Pause
		var err error
		if scope == pauses.ScopeDefinition {
			p, err = s.engine.PauseDefinition(ctx, name, req.Reason)
		} else {
			p, err = s.engine.PauseQueue(ctx, name, req.Reason)
		}
		if err != nil {
			return nil, fail(err)
		}
		resp.Pauses = append(resp.Pauses, scopePause(p))
	case "unpause":
		var err error
		if scope == pauses.ScopeDefinition {
			resp.Found, err = s.engine.UnpauseDefinition(ctx, name)
		} else {
			resp.Found, err = s.engine.UnpauseQueue(ctx, name)
		}
		if err != nil {
			return nil, fail(err)
		}
	default:
		ps, err := s.engine.PausedScopes(ctx)
		if err != nil {
			return nil, fail(err)
		}
		for _, p := range ps {
			resp.Pauses = append(resp.Pauses, scopePause(p))
		}
	}
	return resp, nil
}

func scopePause(p pauses.Pause) api.ScopePause {
	return api.ScopePause{Scope: p.Scope, Name: p.Name, Note: p.Note, By: p.By, At: p.At}
}
