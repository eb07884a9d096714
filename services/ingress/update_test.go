package ingress_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/worker"
)

// ledger starts from its input's balance; each accepted deposit runs step "post-<update ID>"
// and is completed with the new balance; signal "close" completes the run with the balance.
// Update "deposit" rejects amounts that are not positive; "peek" completes at once with the
// number of updates so far.
func registerLedger(reg *flow.Registry) { registerLedgerWith(reg, positiveDeposit) }

// positiveDeposit is the ledger's deposit validator: it rejects amounts that are not positive.
func positiveDeposit(amount int) error {
	if amount <= 0 {
		return flow.NewError("invalid_amount", "a deposit must be positive")
	}
	return nil
}

// registerLedgerWith registers the ledger with deposit as the validator of update "deposit".
func registerLedgerWith(reg *flow.Registry, deposit func(amount int) error) {
	flow.RegisterWorkflow(reg, "ledger", func(ctx *flow.Context, balance int) (flow.Decision, error) {
		for _, u := range ctx.Updates() {
			if u.Name != "deposit" || u.Status != flow.UpdateAccepted && u.Status != flow.UpdateCompleted {
				continue
			}
			out := ctx.StepOutput("post-" + u.ID)
			if out == nil {
				var amount int
				if err := flow.DecodeUpdate(u, &amount); err != nil {
					return nil, err
				}
				return ctx.ScheduleStep("post-"+u.ID, "post", balance+amount), nil
			}
			if err := json.Unmarshal(out, &balance); err != nil {
				return nil, err
			}
			if u.Open() {
				return ctx.CompleteUpdate(u.ID, balance), nil
			}
		}
		if ctx.Signal("close") != nil {
			return ctx.Complete(balance), nil
		}
		return ctx.AwaitSignal("close", "close"), nil
	}, flow.WithSearchAttributes(flow.Keyword("owner")))
	flow.RegisterStep(reg, "post", func(_ context.Context, balance int) (int, error) { return balance, nil })
	flow.RegisterUpdate(reg, "ledger", "deposit", flow.UpdateHandler[int]{
		Validate: func(_ *flow.Context, _ *flow.Update, amount int) error { return deposit(amount) },
	})
	flow.RegisterUpdate(reg, "ledger", "peek", flow.UpdateHandler[any]{
		Complete: func(ctx *flow.Context, _ *flow.Update, _ any) (any, error) { return len(ctx.Updates()), nil },
	})
}

func setupLedger(t *testing.T, faults *fault.Injector) *bundle {
	t.Helper()
	b, _ := setupLedgerWorker(t, faults)
	return b
}

// setupLedgerWorker is setupLedger that also returns the worker.
func setupLedgerWorker(t *testing.T, faults *fault.Injector) (*bundle, *worker.Worker) {
	t.Helper()
	return setupParts(t, ingress.Config{Faults: faults}, parts{register: func(reg *flow.Registry) {
		registerLedger(reg)
		registerGated(reg)
		registerVault(reg)
	}})
}

// count returns how many events of type typ run runID's history holds, after checking its
// invariants.
func (b *bundle) count(t *testing.T, runID string, typ event.Type, match func(event.Payload) bool) int {
	t.Helper()
	hist, err := b.client.History(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Empty(t, core.Check(runID, hist), "history invariants")
	n := 0
	for _, e := range hist {
		if e.Type() == typ && (match == nil || match(e.Payload)) {
			n++
		}
	}
	return n
}

func TestUpdateOverNATS(t *testing.T) {
	b := setupLedger(t, nil)
	ctx := t.Context()
	runID, err := b.client.Start(ctx, "ledger", 100, &flow.StartOptions{RunID: "ledger-1"})
	require.NoError(t, err)

	out, err := b.client.Update(ctx, runID, "deposit", 10, &flow.UpdateOptions{UpdateID: "d1", Wait: true})
	require.NoError(t, err)
	var balance int
	require.NoError(t, out.Decode(&balance))
	require.Equal(t, 110, balance)

	_, err = b.client.Update(ctx, runID, "deposit", -1, &flow.UpdateOptions{UpdateID: "d2", Wait: true})
	require.ErrorIs(t, err, flow.ErrUpdateRejected)
	require.ErrorContains(t, err, "a deposit must be positive")

	out, err = b.client.Update(ctx, runID, "peek", nil, &flow.UpdateOptions{Wait: true})
	require.NoError(t, err)
	require.JSONEq(t, `3`, string(out.Result))

	// The same update ID again: applied once, the same outcome.
	again, err := b.client.Update(ctx, runID, "deposit", 10, &flow.UpdateOptions{UpdateID: "d1", Wait: true})
	require.NoError(t, err)
	require.JSONEq(t, `110`, string(again.Result))
	require.Equal(t, 3, b.count(t, runID, event.TypeUpdateReceived, nil))
	_, err = b.client.Update(ctx, runID, "deposit", 11, &flow.UpdateOptions{UpdateID: "d1"})
	require.ErrorIs(t, err, flow.ErrDeliveryConflict)

	// Polling by update ID.
	polled, err := b.client.UpdateResult(ctx, runID, "d1")
	require.NoError(t, err)
	require.Equal(t, flow.UpdateCompleted, polled.Status)
	_, err = b.client.UpdateResult(ctx, runID, "nope")
	require.ErrorIs(t, err, flow.ErrNotFound)

	// An ended run refuses updates.
	_, err = b.client.Signal(ctx, runID, "close", nil, nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Result(ctx, runID, &balance))
	require.Equal(t, 110, balance)
	_, err = b.client.Update(ctx, runID, "deposit", 1, &flow.UpdateOptions{Wait: true})
	require.ErrorIs(t, err, flow.ErrTerminal)
}

func TestUpdateOverHTTP(t *testing.T) {
	b := setupLedger(t, nil)
	ctx := t.Context()
	_, err := b.client.Start(ctx, "ledger", 1, &flow.StartOptions{RunID: "ledger-h"})
	require.NoError(t, err)
	call := func(method, path, body string) (int, map[string]any) {
		return sendJSON[map[string]any](ctx, t, method, b.base+path, body)
	}
	code, st := call(http.MethodPost, "/v1/runs/ledger-h/updates/deposit?wait=true&update_id=h1", `4`)
	require.Equal(t, http.StatusOK, code, st)
	require.Equal(t, "completed", st["status"])
	require.EqualValues(t, 5, st["result"])

	code, st = call(http.MethodPost, "/v1/runs/ledger-h/updates/deposit?update_id=h2", `0`)
	require.Equal(t, http.StatusAccepted, code, st)
	require.Equal(t, "h2", st["delivery_id"])
	code, st = call(http.MethodGet, "/v1/runs/ledger-h/updates/h2?wait=10s", ``)
	require.Equal(t, http.StatusOK, code, st)
	require.Equal(t, "rejected", st["status"])

	code, st = call(http.MethodGet, "/v1/runs/ledger-h/updates/h1", ``)
	require.Equal(t, http.StatusOK, code, st)
	require.Equal(t, "completed", st["status"])
	code, _ = call(http.MethodGet, "/v1/runs/ledger-h/updates/missing", ``)
	require.Equal(t, http.StatusNotFound, code)
	code, _ = call(http.MethodGet, "/v1/runs/ledger-h/updates/h1?wait=forever", ``)
	require.Equal(t, http.StatusBadRequest, code)

	code, st = call(http.MethodPost, "/v1/workflows/ledger/update-with-start/deposit?wait=true", `{"run_id":"ledger-w","input":10,"payload":5,"update_id":"w1"}`)
	require.Equal(t, http.StatusOK, code, st)
	require.EqualValues(t, 15, st["result"])
	code, st = call(http.MethodPost, "/v1/workflows/ledger/signal-with-start/close", `{"run_id":"ledger-s","input":7}`)
	require.Equal(t, http.StatusCreated, code, st)
	var balance int
	require.NoError(t, b.client.Result(ctx, "ledger-s", &balance))
	require.Equal(t, 7, balance)
	code, st = call(http.MethodPost, "/v1/workflows/ledger/signal-with-start/close", `{"input":7}`)
	require.Equal(t, http.StatusBadRequest, code, st)

	// The OpenAPI document describes the routes.
	code, doc := call(http.MethodGet, "/v1/openapi.json", ``)
	require.Equal(t, http.StatusOK, code)
	paths := doc["paths"].(map[string]any)
	for p, method := range map[string]string{"/v1/runs/{run}/updates/{name}": "post", "/v1/runs/{run}/updates/{update_id}": "get",
		"/v1/workflows/{definition}/update-with-start/{name}": "post", "/v1/workflows/{definition}/signal-with-start/{name}": "post"} {
		require.Contains(t, paths[p], method, p)
	}
}

// TestWithStartRacesStart: an update-with-start (or signal-with-start) and a plain start of the
// same run ID, in both orders and concurrently, several times: exactly one run.started, the
// input applied exactly once, the update completed.
func TestWithStartRacesStart(t *testing.T) {
	b := setupLedger(t, nil)
	ctx := t.Context()
	plain := func(runID string) error {
		_, err := b.client.Start(ctx, "ledger", 1, &flow.StartOptions{RunID: runID})
		return err
	}
	update := func(runID string) error {
		out, err := b.client.UpdateWithStart(ctx, "ledger", 1, "deposit", 2, &flow.WithStartOptions{RunID: runID, UpdateID: "u-" + runID, Wait: true})
		if err == nil && string(out.Result) != "3" {
			err = fmt.Errorf("update of %s returned %s, want 3", runID, out.Result)
		}
		return err
	}
	signal := func(runID string) error {
		_, _, err := b.client.SignalWithStart(ctx, "ledger", 1, "close", nil, &flow.WithStartOptions{RunID: runID, UpdateID: "s-" + runID})
		return err
	}
	for i := range 6 {
		for _, mode := range []string{"start-first", "input-first", "concurrent"} {
			for kind, withStart := range map[string]func(string) error{"update": update, "signal": signal} {
				runID := fmt.Sprintf("race-%s-%s-%d", kind, mode, i)
				switch mode {
				case "start-first":
					require.NoError(t, plain(runID))
					require.NoError(t, withStart(runID))
				case "input-first":
					require.NoError(t, withStart(runID))
					require.NoError(t, plain(runID))
				default:
					var wg sync.WaitGroup
					errs := make([]error, 2)
					release := make(chan struct{})
					for j, fn := range []func(string) error{plain, withStart} {
						wg.Go(func() {
							<-release
							errs[j] = fn(runID)
						})
					}
					close(release)
					wg.Wait()
					require.NoError(t, errs[0], runID)
					require.NoError(t, errs[1], runID)
				}
				require.Equal(t, 1, b.count(t, runID, event.TypeRunStarted, nil), runID)
				if kind == "update" {
					require.Equal(t, 1, b.count(t, runID, event.TypeUpdateReceived, nil), runID)
					require.Equal(t, 1, b.count(t, runID, event.TypeUpdateCompleted, nil), runID)
				} else {
					require.Equal(t, 1, b.count(t, runID, event.TypeSignalReceived, nil), runID)
				}
			}
		}
	}
}

// TestUpdateAnswerLost: the ingress commits an update and its answer is lost (it died there):
// the client sends the update again with the same ID and gets the same outcome; the history
// holds it once.
func TestUpdateAnswerLost(t *testing.T) {
	f := &fault.Injector{}
	b := setupLedger(t, f)
	ctx := t.Context()
	runID, err := b.client.Start(ctx, "ledger", 100, &flow.StartOptions{RunID: "ledger-f"})
	require.NoError(t, err)
	before := f.Hits(fault.IngressBeforeReply) // the start's answer
	f.Arm(fault.IngressBeforeReply, fault.Fail, 0, 1)
	out, err := b.client.Update(ctx, runID, "deposit", 5, &flow.UpdateOptions{UpdateID: "lost-1", Wait: true})
	require.NoError(t, err)
	require.JSONEq(t, `105`, string(out.Result))
	require.Equal(t, before+2, f.Hits(fault.IngressBeforeReply), "the first answer was dropped, the retry answered")
	again, err := b.client.Update(ctx, runID, "deposit", 5, &flow.UpdateOptions{UpdateID: "lost-1", Wait: true})
	require.NoError(t, err)
	require.Equal(t, out.Result, again.Result)
	require.Equal(t, 1, b.count(t, runID, event.TypeUpdateReceived, nil))
	require.Equal(t, 1, b.count(t, runID, event.TypeUpdateCompleted, func(p event.Payload) bool {
		return p.(*event.UpdateCompleted).UpdateID == "lost-1"
	}))
}

// TestWithStartWithoutWorker: with no live worker to start a run, a with-start input is still
// delivered to the run it names when that run exists (started the same way); a new run is
// refused with ErrNoWorker, as a start is.
func TestWithStartWithoutWorker(t *testing.T) {
	b, w := setupLedgerWorker(t, nil)
	ctx := t.Context()
	_, err := b.client.Start(ctx, "ledger", 1, &flow.StartOptions{RunID: "ledger-nw"})
	require.NoError(t, err)
	require.NoError(t, w.Stop(ctx))
	waitFor(t, "the ingress sees no live worker", func() bool {
		_, err := b.client.Start(ctx, "ledger", 1, &flow.StartOptions{RunID: "probe"})
		return errors.Is(err, flow.ErrNoWorker)
	})
	out, err := b.client.UpdateWithStart(ctx, "ledger", 1, "deposit", 2, &flow.WithStartOptions{RunID: "ledger-nw", UpdateID: "nw-1"})
	require.NoError(t, err)
	require.False(t, out.Created)
	_, created, err := b.client.SignalWithStart(ctx, "ledger", 1, "close", nil, &flow.WithStartOptions{RunID: "ledger-nw"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, 1, b.count(t, "ledger-nw", event.TypeUpdateReceived, nil))
	require.Equal(t, 1, b.count(t, "ledger-nw", event.TypeSignalReceived, nil))
	_, err = b.client.UpdateWithStart(ctx, "ledger", 2, "deposit", 2, &flow.WithStartOptions{RunID: "ledger-nw", UpdateID: "nw-2"})
	require.ErrorIs(t, err, flow.ErrRunExists)
	_, err = b.client.UpdateWithStart(ctx, "ledger", 1, "deposit", 2, &flow.WithStartOptions{RunID: "ledger-new", UpdateID: "nw-3"})
	require.ErrorIs(t, err, flow.ErrNoWorker)
}

// gateOpen releases the step of the "gated" workflow.
var gateOpen = make(chan struct{})

// registerGated registers workflow "gated": one step that runs until gateOpen is closed, then
// completion with its output; update "ping" completes at once with "pong".
func registerGated(reg *flow.Registry) {
	flow.RegisterWorkflow(reg, "gated", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if out := ctx.StepOutput("hold"); out != nil {
			return ctx.Complete(out), nil
		}
		return ctx.ScheduleStep("hold", "hold", nil), nil
	})
	flow.RegisterStep(reg, "hold", func(ctx context.Context, _ any) (string, error) {
		select {
		case <-gateOpen:
			return "released", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	flow.RegisterUpdate(reg, "gated", "ping", flow.UpdateHandler[any]{
		Complete: func(*flow.Context, *flow.Update, any) (any, error) { return "pong", nil },
	})
}

// TestUpdateWhileStepRuns: on the real engine, an update that arrives while the run's step is
// in flight is answered at once, and the step is not disturbed: it runs once, to completion.
func TestUpdateWhileStepRuns(t *testing.T) {
	b := setupLedger(t, nil)
	ctx := t.Context()
	runID, err := b.client.Start(ctx, "gated", nil, &flow.StartOptions{RunID: "gated-1"})
	require.NoError(t, err)
	waitFor(t, "the step is in flight", func() bool {
		s, err := b.client.Snapshot(ctx, runID)
		return err == nil && s.Progress.StepsRunning == 1
	})
	for i := range 3 {
		out, err := b.client.Update(ctx, runID, "ping", i, &flow.UpdateOptions{Wait: true})
		require.NoError(t, err)
		require.JSONEq(t, `"pong"`, string(out.Result))
	}
	s, err := b.client.Snapshot(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, 1, s.Progress.StepsRunning, "the step is still in flight")
	close(gateOpen)
	var got string
	require.NoError(t, b.client.Result(ctx, runID, &got))
	require.Equal(t, "released", got)
	require.Equal(t, 0, b.count(t, runID, event.TypeStepCancelled, nil))
	require.Equal(t, 1, b.count(t, runID, event.TypeStepScheduled, nil))
	require.Equal(t, 1, b.count(t, runID, event.TypeStepCompleted, nil))
	require.Equal(t, 3, b.count(t, runID, event.TypeUpdateCompleted, nil))
}

// TestWithStartAttributes: an update-with-start records the search attributes it starts the
// run with; a later one for the same run must name the same ones.
func TestWithStartAttributes(t *testing.T) {
	b := setupLedger(t, nil)
	ctx := t.Context()
	opts := flow.WithStartOptions{RunID: "ledger-a", UpdateID: "a1", Wait: true, Attributes: flow.Attrs{"owner": "ann"}}
	out, err := b.client.UpdateWithStart(ctx, "ledger", 1, "deposit", 1, &opts)
	require.NoError(t, err)
	require.True(t, out.Created)
	s, err := b.client.Snapshot(ctx, "ledger-a")
	require.NoError(t, err)
	require.Contains(t, fmt.Sprint(s.Attributes), "ann")
	opts.UpdateID = "a2"
	out, err = b.client.UpdateWithStart(ctx, "ledger", 1, "deposit", 1, &opts)
	require.NoError(t, err)
	require.False(t, out.Created)
	require.JSONEq(t, `3`, string(out.Result))
	opts.UpdateID, opts.Attributes = "a3", flow.Attrs{"owner": "bob"}
	_, err = b.client.UpdateWithStart(ctx, "ledger", 1, "deposit", 1, &opts)
	require.ErrorIs(t, err, flow.ErrRunExists)
	opts.Attributes = flow.Attrs{"undeclared": "x"}
	_, err = b.client.UpdateWithStart(ctx, "ledger", 1, "deposit", 1, &opts)
	require.ErrorIs(t, err, flow.ErrInvalidInput)
}
