package ingress_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flow/internal/natsserver"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// pauseStack is Flow on an embedded NATS server, with a worker and a history service that
// can be restarted, each with its fault injector.
type pauseStack struct {
	srv                    *natsserver.Server
	reg                    *flow.Registry
	client                 *flow.Client
	w                      *worker.Worker
	h                      *history.Service
	workerFaults, hsFaults *fault.Injector
}

func newPauseStack(t *testing.T, reg *flow.Registry) *pauseStack {
	return newPauseStackWith(t, reg, nil, nil)
}

func newPauseStackWith(t *testing.T, reg *flow.Registry, workerFaults, hsFaults *fault.Injector) *pauseStack {
	t.Helper()
	srv := natstest.RunJetStream(t)
	ps := &pauseStack{srv: srv, reg: reg, workerFaults: workerFaults, hsFaults: hsFaults}
	ps.startHistory(t)
	in, err := ingress.New(ingress.Config{Conn: natstest.Connect(t, srv), Logger: quiet, HTTPAddr: "off"})
	require.NoError(t, err)
	require.NoError(t, in.Start(t.Context()))
	t.Cleanup(func() { _ = in.Stop() })
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { _ = s.Stop() })
	ps.client, err = flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	ps.startWorker(t)
	return ps
}

func (ps *pauseStack) startHistory(t *testing.T) {
	t.Helper()
	h, err := history.New(history.Config{Conn: natstest.Connect(t, ps.srv), HTTPAddr: "off", Logger: quiet, Faults: ps.hsFaults})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { _ = h.Stop() })
	ps.h = h
}

func (ps *pauseStack) startWorker(t *testing.T) {
	t.Helper()
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, ps.srv), Logger: quiet, AckWait: 2 * time.Second, Faults: ps.workerFaults}, ps.reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	ps.w = w
}

// parkedEntries counts the FLOW_PARKED entries.
func (ps *pauseStack) parkedEntries(t *testing.T) int {
	t.Helper()
	kv, err := natstest.JetStream(t, ps.srv).KeyValue(t.Context(), streams.ParkedBucket)
	require.NoError(t, err)
	keys, err := kv.ListKeys(t.Context())
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0
	}
	require.NoError(t, err)
	n := 0
	for range keys.Keys() {
		n++
	}
	return n
}

func (ps *pauseStack) history(t *testing.T, runID string) []event.Envelope {
	t.Helper()
	h, err := ps.client.History(t.Context(), runID, 0)
	require.NoError(t, err)
	return h
}

func types(h []event.Envelope) []string {
	out := make([]string, len(h))
	for i, e := range h {
		out[i] = string(e.Type())
	}
	return out
}

func has(h []event.Envelope, typ event.Type) bool {
	for _, e := range h {
		if e.Type() == typ {
			return true
		}
	}
	return false
}

// TestPauseRunMidFlow pauses a run while its step's first attempt runs. The attempt finishes
// and its failure is recorded, its retry is scheduled and fires, the run's timer fires and a
// signal arrives: all recorded, while no attempt starts and no decision is made. Unpausing
// runs the held attempt and completes the run.
func TestPauseRunMidFlow(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var attempts, finals atomic.Int32
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterStep(reg, "flaky", func(ctx context.Context, _ json.RawMessage) (string, error) {
		if attempts.Add(1) == 1 {
			started <- struct{}{}
			<-release
			return "", errors.New("connection reset")
		}
		return "ok", nil
	})
	flow.RegisterStep(reg, "final", func(context.Context, json.RawMessage) (string, error) {
		finals.Add(1)
		return "done", nil
	})
	flow.RegisterWorkflow(reg, "midflow", func(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
		s := ctx.Snapshot()
		if s.Waits["nap"] == nil {
			return ctx.Sleep("nap", 1500*time.Millisecond), nil
		}
		if out := ctx.StepOutput("a"); out == nil {
			return ctx.ScheduleStep("a", "flaky", nil, flow.WithRetry(flow.RetryPolicy{MaxAttempts: 3, InitialInterval: 50 * time.Millisecond})), nil
		}
		if !ctx.Fired("nap") {
			return ctx.Sleep("nap", 1500*time.Millisecond), nil
		}
		if ctx.Signal("go") == nil {
			return ctx.AwaitSignal("go", "go"), nil
		}
		if out := ctx.StepOutput("b"); out != nil {
			return ctx.Complete(out), nil
		}
		return ctx.ScheduleStep("b", "final", nil), nil
	})
	ps := newPauseStack(t, reg)
	ctx := t.Context()
	runID, err := ps.client.Start(ctx, "midflow", nil, &flow.StartOptions{RunID: "mid-1"})
	require.NoError(t, err)
	<-started // attempt 1 of step a runs
	// An attempt may start ahead of the commit that schedules it (pipelined commits): pause
	// once that commit is recorded, so that the attempt is the run's.
	require.Eventually(t, func() bool { return has(ps.history(t, runID), event.TypeStepScheduled) }, 10*time.Second, 5*time.Millisecond)
	to, err := ps.client.Pauses().PauseRun(ctx, runID, &flow.PauseOptions{Reason: "deploy in progress", By: "ann", RequestID: "p-1"})
	require.NoError(t, err)
	require.Equal(t, runID, to)
	// Repeating the request, or pausing again, changes nothing.
	_, err = ps.client.Pauses().PauseRun(ctx, runID, &flow.PauseOptions{RequestID: "p-1"})
	require.NoError(t, err)
	_, err = ps.client.Pauses().PauseRun(ctx, runID, &flow.PauseOptions{RequestID: "p-2"})
	require.NoError(t, err)
	close(release) // attempt 1 fails now, while the run is paused

	// The signal arrives while paused; the retry and the timer fire while paused.
	_, err = ps.client.Signal(ctx, runID, "go", map[string]int{"n": 1}, &flow.DeliveryOptions{DeliveryID: "sig-1"})
	require.NoError(t, err)
	var last []event.Envelope
	for deadline := time.Now().Add(40 * time.Second); ; {
		last = ps.history(t, runID)
		if has(last, event.TypeStepFailed) && has(last, event.TypeStepRetryFired) && has(last, event.TypeWaitFired) && has(last, event.TypeSignalReceived) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failure, the retry's fire, the timer's fire and the signal are not all recorded while paused: %v (attempts %d)", types(last), attempts.Load())
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not a wait for an outcome
	}
	h := ps.history(t, runID)
	require.Equal(t, int32(1), attempts.Load(), "no attempt starts while paused, though attempt 2 is due")
	paused := 0
	for _, e := range h {
		if p, ok := e.Payload.(*event.RunPaused); ok {
			paused++
			require.Equal(t, "ann", p.By)
			require.Equal(t, "p-1", p.DeliveryID)
		}
		if e.Type() == event.TypeSignalAwaited || e.Type() == event.TypeStepScheduled && e.Seq > 4 {
			t.Fatalf("a decision was recorded while paused: %v", types(h))
		}
	}
	require.Equal(t, 1, paused, "one run.paused: %v", types(h))
	s, err := ps.client.Snapshot(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, flow.StatusPaused, s.Status)
	waitFor(t, "the runs index lists the run as paused", func() bool {
		page, err := ps.client.Runs(ctx, &flow.RunsFilter{Where: `status = "paused"`})
		return err == nil && len(page.Runs) == 1 && page.Runs[0].RunID == runID && strings.Contains(page.Runs[0].Detail, "deploy in progress")
	})

	_, err = ps.client.Pauses().UnpauseRun(ctx, runID, &flow.PauseOptions{Reason: "deployed", By: "bob", RequestID: "u-1"})
	require.NoError(t, err)
	var out string
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, ps.client.Result(waitCtx, runID, &out))
	require.Equal(t, "done", out)
	require.Equal(t, int32(2), attempts.Load())
	require.Equal(t, int32(1), finals.Load())
	h = ps.history(t, runID)
	require.Empty(t, core.Check(runID, h), "the history satisfies every invariant")
	t.Logf("history: %v", types(h))
}

// TestPauseDefinitionHoldsNewRuns pauses a definition, starts runs of it, restarts the worker
// while it is paused, and unpauses it: the runs recorded their signals meanwhile but made no
// decision and ran no step, and once unpaused every one of them completes; nothing was lost.
func TestPauseDefinitionHoldsNewRuns(t *testing.T) {
	t.Parallel()
	var steps atomic.Int32
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterStep(reg, "count", func(context.Context, json.RawMessage) (int, error) { return int(steps.Add(1)), nil })
	flow.RegisterWorkflow(reg, "held", func(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
		if ctx.Signal("go") == nil {
			return ctx.AwaitSignal("go", "go"), nil
		}
		if out := ctx.StepOutput("count"); out != nil {
			return ctx.Complete(out), nil
		}
		return ctx.ScheduleStep("count", "count", nil), nil
	})
	ps := newPauseStack(t, reg)
	ctx := t.Context()
	p, err := ps.client.Pauses().PauseDefinition(ctx, "held", &flow.PauseOptions{Reason: "bad deploy", By: "ops"})
	require.NoError(t, err)
	require.Equal(t, "held", p.Name)
	list, err := ps.client.Pauses().List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "bad deploy", list[0].Note)
	waitFor(t, "the worker holds the definition", func() bool { return ps.w.Holds("held") })

	const n = 5
	var runs []string
	for i := range n {
		id, err := ps.client.Start(ctx, "held", nil, &flow.StartOptions{RunID: fmt.Sprintf("held-%d", i)})
		require.NoError(t, err)
		runs = append(runs, id)
		_, err = ps.client.Signal(ctx, id, "go", i, &flow.DeliveryOptions{DeliveryID: fmt.Sprintf("go-%d", i)})
		require.NoError(t, err)
	}
	waitFor(t, "every run is parked by the pause", func() bool {
		page, err := ps.client.Runs(ctx, &flow.RunsFilter{Definition: "held", Parked: true})
		if err != nil || len(page.Runs) != n {
			return false
		}
		for _, r := range page.Runs {
			if !strings.Contains(r.Parked, `definition "held" is paused by ops`) {
				return false
			}
		}
		return true
	})
	// The worker dies and another starts while the definition is paused.
	require.NoError(t, ps.w.Stop(context.Background()))
	ps.startWorker(t)
	// A signal recorded after the restart.
	_, err = ps.client.Signal(ctx, runs[0], "late", "x", &flow.DeliveryOptions{DeliveryID: "late-0"})
	require.NoError(t, err)
	waitFor(t, "the late signal is recorded", func() bool { return count(ps.history(t, runs[0]), "signal.received") == 2 })
	for _, id := range runs {
		h := ps.history(t, id)
		require.Equal(t, []string{"run.started", "signal.received"}, types(h)[:2], "run %s", id)
		require.False(t, has(h, event.TypeSignalAwaited) || has(h, event.TypeStepScheduled), "run %s decided while paused: %v", id, types(h))
	}
	require.Zero(t, steps.Load(), "no step ran while the definition was paused")

	found, err := ps.client.Pauses().UnpauseDefinition(ctx, "held", nil)
	require.NoError(t, err)
	require.True(t, found)
	for _, id := range runs {
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		var out int
		require.NoError(t, ps.client.Result(waitCtx, id, &out), "run %s", id)
		cancel()
		require.Empty(t, core.Check(id, ps.history(t, id)))
	}
	require.Equal(t, int32(n), steps.Load())
	found, err = ps.client.Pauses().UnpauseDefinition(ctx, "held", nil)
	require.NoError(t, err)
	require.False(t, found)
	list, err = ps.client.Pauses().List(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
}

// TestPauseOnExhaustedRetries: a step whose retry policy pauses the run on exhaustion fails
// every attempt until "fixed"; the run pauses with the step and its error, and unpausing it
// after the fix retries the step with a fresh attempt and completes the run.
func TestPauseOnExhaustedRetries(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	var attempts atomic.Int32
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterStep(reg, "charge", func(context.Context, json.RawMessage) (string, error) {
		attempts.Add(1)
		if broken.Load() {
			return "", errors.New("nil pointer in tax table")
		}
		return "charged", nil
	})
	flow.RegisterWorkflow(reg, "billing", func(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
		if out := ctx.StepOutput("charge"); out != nil {
			return ctx.Complete(out), nil
		}
		return ctx.ScheduleStep("charge", "charge", nil,
			flow.WithRetry(flow.RetryPolicy{MaxAttempts: 3, InitialInterval: 20 * time.Millisecond, OnExhaustion: flow.ExhaustionPauseRun})), nil
	})
	ps := newPauseStack(t, reg)
	ctx := t.Context()
	runID, err := ps.client.Start(ctx, "billing", nil, &flow.StartOptions{RunID: "bill-1"})
	require.NoError(t, err)
	var detail string
	waitFor(t, "the run pauses once the step exhausted its attempts", func() bool {
		page, err := ps.client.Runs(ctx, &flow.RunsFilter{Status: []string{string(flow.StatusPaused)}})
		if err != nil || len(page.Runs) != 1 {
			return false
		}
		detail = page.Runs[0].Detail
		return true
	})
	require.Equal(t, "paused: step charge exhausted 3 attempt(s): error: nil pointer in tax table; fix and run `flow unpause bill-1`", detail)
	require.Equal(t, int32(3), attempts.Load())
	s, err := ps.client.Snapshot(ctx, runID)
	require.NoError(t, err)
	require.True(t, s.Steps["charge"].Held)
	require.Nil(t, s.Outcome)

	broken.Store(false) // the fix is deployed
	_, err = ps.client.Pauses().UnpauseRun(ctx, runID, &flow.PauseOptions{Reason: "tax table fixed"})
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var out string
	require.NoError(t, ps.client.Result(waitCtx, runID, &out))
	require.Equal(t, "charged", out)
	require.Equal(t, int32(4), attempts.Load())
	h := ps.history(t, runID)
	require.Empty(t, core.Check(runID, h))
	require.Equal(t, []string{"run.started", "step.scheduled",
		"step.failed", "step.retry_scheduled", "step.retry_fired",
		"step.failed", "step.retry_scheduled", "step.retry_fired",
		"step.failed", "run.paused",
		"run.unpaused", "step.retry_scheduled", "step.retry_fired",
		"step.completed", "run.completed"}, types(h))
}

// TestPauseReleaseSurvivesCrashes kills the writes of a definition pause's release between
// each pair: a worker parks a held run and dies before acknowledging its task
// (PauseParkBeforeAck), the history service sends a released run its task and dies before
// deleting its parked entry (PauseDispatchBeforeDelete), and the definition is unpaused while
// no history service runs. Every run completes once, and no parked entry is left.
func TestPauseReleaseSurvivesCrashes(t *testing.T) {
	t.Parallel()
	var steps atomic.Int32
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterStep(reg, "once", func(context.Context, json.RawMessage) (int, error) { return int(steps.Add(1)), nil })
	flow.RegisterWorkflow(reg, "crashy", func(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
		if out := ctx.StepOutput("once"); out != nil {
			return ctx.Complete(out), nil
		}
		return ctx.ScheduleStep("once", "once", nil), nil
	})
	wf, hf := &fault.Injector{}, &fault.Injector{}
	wf.Arm(fault.PauseParkBeforeAck, fault.Fail, 0, 1)
	hf.Arm(fault.PauseDispatchBeforeDelete, fault.Fail, 0, 1)
	ps := newPauseStackWith(t, reg, wf, hf)
	ctx := t.Context()
	start := func(ids ...string) {
		for _, id := range ids {
			_, err := ps.client.Start(ctx, "crashy", nil, &flow.StartOptions{RunID: id})
			require.NoError(t, err)
		}
		waitFor(t, "the runs are parked", func() bool {
			page, err := ps.client.Runs(ctx, &flow.RunsFilter{Definition: "crashy", Parked: true, Status: []string{string(flow.StatusPending)}})
			if err != nil {
				return false
			}
			parked := map[string]bool{}
			for _, r := range page.Runs {
				parked[r.RunID] = true
			}
			for _, id := range ids {
				if !parked[id] {
					return false
				}
			}
			return true
		})
	}
	complete := func(ids ...string) {
		for _, id := range ids {
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			var out int
			require.NoError(t, ps.client.Result(waitCtx, id, &out), "run %s", id)
			cancel()
			require.Empty(t, core.Check(id, ps.history(t, id)))
		}
	}
	pause := func() {
		_, err := ps.client.Pauses().PauseDefinition(ctx, "crashy", nil)
		require.NoError(t, err)
		waitFor(t, "the worker holds the definition", func() bool { return ps.w.Holds("crashy") })
	}
	pause()
	start("c-1", "c-2", "c-3")
	waitFor(t, "the unacknowledged task comes back and is parked again", func() bool { return wf.Hits(fault.PauseParkBeforeAck) >= 4 })
	require.Zero(t, steps.Load())
	_, err := ps.client.Pauses().UnpauseDefinition(ctx, "crashy", nil)
	require.NoError(t, err)
	complete("c-1", "c-2", "c-3")
	require.Equal(t, 1, ps.parkedEntries(t), "the dispatch that died before its delete left its entry")

	// Unpaused while no history service runs: the next one releases the runs when it starts.
	pause()
	start("c-4", "c-5")
	require.NoError(t, ps.h.Stop())
	_, err = ps.client.Pauses().UnpauseDefinition(ctx, "crashy", nil)
	require.NoError(t, err)
	ps.hsFaults = nil
	ps.startHistory(t)
	complete("c-4", "c-5")
	waitFor(t, "no parked entry is left", func() bool { return ps.parkedEntries(t) == 0 })
	require.Equal(t, int32(5), steps.Load(), "each run's step ran once")
}
