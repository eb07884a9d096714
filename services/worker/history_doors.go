package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/parked"
)

// A worker writes neither FLOW_HOOKS nor FLOW_PARKED: the history service is their one writer
// (internal/api/derived.go). The worker asks it to claim the token of each hook a decision
// creates, before committing the decision, and to park each run it cannot drive, before
// acknowledging the run's task. With no answer the decision fails (or the task is not
// acknowledged), and the task comes back.

// ErrHistoryUnavailable is wrapped by the error of a claim or a park that no history service
// answered.
var ErrHistoryUnavailable = errors.New("worker: the history service did not answer")

// historyTimeout bounds the wait for the history service's answer to a claim or a park.
const historyTimeout = 10 * time.Second

// historyHost is the worker's engine host: jshost's for resume tasks, with hook tokens claimed
// from the history service.
type historyHost struct {
	*jshost.Host
	nc *nats.Conn
}

// RegisterHook implements engine.Host: the history service claims token for hook hookID of
// run runID (create-only; taken over from a run that ended). A token a live run's other hook
// holds returns a *engine.TokenTakenError; no answer an error wrapping ErrHistoryUnavailable.
func (h *historyHost) RegisterHook(ctx context.Context, token, runID, hookID string) error {
	var resp api.HookClaimResponse
	if err := askHistory(ctx, h.nc, api.SubjectHookClaim, api.HookClaim{Token: token, RunID: runID, HookID: hookID}, &resp); err != nil {
		return fmt.Errorf("claiming the token of hook %q of run %q: %w", hookID, runID, err)
	}
	if t := resp.TakenBy; t != nil {
		return &engine.TokenTakenError{RunID: t.RunID, HookID: t.HookID}
	}
	return nil
}

// ReleaseHook implements engine.Host, and writes nothing: the history service releases the
// tokens of ended runs, and its claim takes over a token whose run ended, which the engine's
// next RegisterHook asks for.
func (h *historyHost) ReleaseHook(context.Context, string, string, string) error { return nil }

// askPark asks the history service to park run p.RunID, and reports whether it did (not for a
// run that ended).
func askPark(ctx context.Context, nc *nats.Conn, p parked.Run) (bool, error) {
	var resp api.ParkResponse
	if err := askHistory(ctx, nc, api.SubjectPark, p, &resp); err != nil {
		return false, fmt.Errorf("parking run %q: %w", p.RunID, err)
	}
	return resp.Parked, nil
}

// askHistory sends req to the history service on subject and decodes its answer into resp.
func askHistory(ctx context.Context, nc *nats.Conn, subject string, req, resp any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	m, err := nc.RequestMsgWithContext(rctx, &nats.Msg{Subject: subject, Data: data})
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("asking on %s: %w", subject, err) // the caller gave up
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w: no history service answers %s; start `flowd history` (or `flow dev`); the task is retried", ErrHistoryUnavailable, subject)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("%w: no answer on %s within %s; the task is retried", ErrHistoryUnavailable, subject, historyTimeout)
	case err != nil:
		return fmt.Errorf("%w: asking on %s: %w", ErrHistoryUnavailable, subject, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		return fmt.Errorf("the history service refused the request on %s (%s): %s", subject, code, m.Header.Get(micro.ErrorHeader))
	}
	if err := json.Unmarshal(m.Data, resp); err != nil {
		return fmt.Errorf("the history service's answer on %s is unreadable: %w", subject, err)
	}
	return nil
}
