package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/pkg/event"
)

// The doors of reset and rerun (internal/api/reset.go, docs/reset.md). A reset is idempotent by
// its request ID (or, without one, by its point and options): a repeat answers with the same
// new run, so a caller that lost the answer asks again.

// resetRoutes adds POST /v1/runs/{run}/reset.
func (s *Service) resetRoutes(mux *routes) {
	mux.HandleFunc("POST /v1/runs/{run}/reset", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(w, r) {
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, s.cfg.MaxBodyBytes))
		if err != nil {
			writeError(w, &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("reading the body: %v", err)})
			return
		}
		if id := r.Header.Get(api.HeaderIdempotencyKey); id != "" && !strings.Contains(string(body), `"request_id"`) {
			body = withRequestID(body, id)
		}
		resp, e := s.reset(r.Context(), r.PathValue("run"), body)
		if e != nil {
			writeError(w, e)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	})
}

// withRequestID sets request_id in a JSON object body, for the Idempotency-Key header.
func withRequestID(body []byte, id string) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	b, _ := json.Marshal(id)
	m["request_id"] = b
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}

// isReset reports whether m is a reset request (flow.ingress.reset.<run>).
func isReset(m *nats.Msg) bool { return strings.HasPrefix(m.Subject, api.SubjectResetPrefix) }

// onReset answers a reset request on NATS.
func (s *Service) onReset(ctx context.Context, m *nats.Msg) {
	resp, e := s.reset(ctx, strings.TrimPrefix(m.Subject, api.SubjectResetPrefix), m.Data)
	if m.Reply == "" {
		return // a reset's answer is its new run: without a reply subject nobody learns it
	}
	s.reply(m, "a reset", resp, e)
}

// reset applies a reset request of run runID with body, a JSON api.ResetRequest.
func (s *Service) reset(ctx context.Context, runID string, body []byte) (*api.ResetResponse, *api.IngressError) {
	bad := func(format string, args ...any) *api.IngressError {
		return &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
	}
	if e := checkUTF8(body, "the reset request"); e != nil {
		return nil, e
	}
	var req api.ResetRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, &api.IngressError{Code: api.CodeInvalidJSON, Message: fmt.Sprintf("the reset request is not a JSON object %s: %v", `{"mode":"seq|step|last_decision|rerun",...}`, err)}
	}
	if !event.ResetMode(req.Mode).Valid() {
		return nil, bad("reset mode %q is not one of seq, step, last_decision, rerun", req.Mode)
	}
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, bad("%s", trimFlow(err))
	}
	ctx, cancel := context.WithTimeout(ctx, inputTimeout)
	defer cancel()
	p := engine.ResetParams{RunID: runID, Mode: event.ResetMode(req.Mode), Seq: req.Seq, StepID: req.StepID, Input: req.Input,
		DropInputs: req.DropInputs, Reason: req.Reason, RequestID: req.RequestID}
	newID, err := s.engine.Reset(ctx, p)
	if err != nil {
		var pe *core.ResetPointError
		switch {
		case errors.As(err, &pe):
			return nil, bad("%s", trimFlow(err))
		case errors.Is(err, engine.ErrResetConflict):
			return nil, &api.IngressError{Code: api.CodeDeliveryConflict, Message: trimFlow(err)}
		case errors.Is(err, engine.ErrResetBusy):
			return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: trimFlow(err)}
		}
		return nil, s.refusal(&input{kind: api.KindTerminate, runID: runID}, err)
	}
	resp := &api.ResetResponse{RunID: runID, NewRunID: newID, Mode: req.Mode}
	if snap, err := s.engine.Snapshot(ctx, newID); err == nil && snap.ResetFrom != nil {
		resp.Point, resp.Reapplied = snap.ResetFrom.Seq, snap.ResetFrom.Reapplied
	}
	return resp, nil
}
