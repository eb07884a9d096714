package engine_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/memstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// commitLog is a store that records the event types of every append it commits, and lets a
// test act before an append reaches the store.
type commitLog struct {
	store.EventStore
	mu      sync.Mutex
	commits [][]event.Type
	// before, if set, runs before each append; it may write to the underlying store.
	before func(events []event.Event)
}

func (s *commitLog) Append(ctx context.Context, runID string, expected uint64, events ...event.Event) (uint64, error) {
	if s.before != nil {
		s.before(events)
	}
	last, err := s.EventStore.Append(ctx, runID, expected, events...)
	if err == nil {
		types := make([]event.Type, len(events))
		for i, e := range events {
			types[i] = e.Payload.EventType()
		}
		s.mu.Lock()
		s.commits = append(s.commits, types)
		s.mu.Unlock()
	}
	return last, err
}

// sequentialSteps registers workflow "seq": steps s0..s(n-1), each on the previous output,
// then completes with the last; and step "inc". runs counts the attempts.
func sequentialSteps(n int, runs *atomic.Int32) func(reg *flow.Registry) {
	return func(reg *flow.Registry) {
		registerSeq(reg, n)
		flow.RegisterStep(reg, "inc", func(_ context.Context, v int) (int, error) {
			runs.Add(1)
			return v + 1, nil
		})
	}
}

// registerSeq registers workflow "seq" of sequentialSteps, without its step.
func registerSeq(reg *flow.Registry, n int) {
	flow.RegisterWorkflow(reg, "seq", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		v := 0
		for i := range n {
			id := "s" + strconv.Itoa(i)
			out, ok, err := flow.Output[int](ctx, id)
			if err != nil || !ok {
				return ctx.ScheduleStep(id, "inc", v), err
			}
			v = out
		}
		return ctx.Complete(v), nil
	})
}

// A step's result and the decision it allows are one commit: with serial commits, a run of n
// sequential steps writes run.started, the first step.scheduled, then one commit per step.
func TestStepResultAndNextDecisionShareACommit(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	b := setup(t, sequentialSteps(3, &runs))
	st := &commitLog{EventStore: memstore.New()}
	e := b.engineWith(t, engine.Config{Store: st, SerialCommits: true})
	runID := b.start(t, e, "seq")
	res, err := e.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.Equal(t, [][]event.Type{
		{event.TypeRunStarted},
		{event.TypeStepScheduled},
		{event.TypeStepCompleted, event.TypeStepScheduled},
		{event.TypeStepCompleted, event.TypeStepScheduled},
		{event.TypeStepCompleted, event.TypeRunCompleted},
	}, st.commits)
	hist := load(t, st, runID)
	require.JSONEq(t, `3`, string(hist[len(hist)-1].Payload.(*event.RunCompleted).Output))
	require.EqualValues(t, 3, runs.Load())

	// Replaying the history (as a cold load does) decides the same at every decision point.
	_, err = core.Replay(runID, hist, sdk.RuntimeOf(b.reg).Replaying(), core.DecideOptions{})
	require.NoError(t, err)
}

// The snapshot holds a step's result and the decision on it before their append: when another
// writer committed first (a signal), the append conflicts, the driver reads the run again from
// the store and records the result after the signal, without running the step again.
func TestStepResultAfterAConflictingWriteIsRecordedOnce(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			if _, ok, err := flow.Output[int](ctx, "a"); err != nil || !ok {
				return ctx.ScheduleStep("a", "inc", 1), err
			}
			v, ok, err := flow.SignalValue[int](ctx, "go")
			if err != nil || !ok {
				return ctx.AwaitSignal("go", "go"), err
			}
			return ctx.Complete(v), nil
		})
		flow.RegisterStep(reg, "inc", func(_ context.Context, v int) (int, error) {
			runs.Add(1)
			return v + 1, nil
		})
	})
	mem := memstore.New()
	st := &commitLog{EventStore: mem}
	worker, other := b.engineOn(t, st, nil), b.engineOn(t, mem, nil)
	runID := b.start(t, worker, "wf")
	var signalled atomic.Bool
	st.before = func(events []event.Event) {
		if _, ok := events[0].Payload.(*event.StepCompleted); ok && signalled.CompareAndSwap(false, true) {
			_, err := other.Signal(context.Background(), runID, "go", []byte(`7`), "d-1")
			require.NoError(t, err)
		}
	}
	res, err := worker.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.EqualValues(t, 1, runs.Load(), "the step ran once")
	hist := load(t, st, runID)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeStepScheduled, event.TypeSignalReceived,
		event.TypeStepCompleted, event.TypeSignalAwaited, event.TypeRunCompleted}, typesOf(hist))
	_, err = core.Replay(runID, hist, sdk.RuntimeOf(b.reg).Replaying(), core.DecideOptions{})
	require.NoError(t, err)
}

// failingAppends fails the appends that carry a step result while fail is set, as an
// unavailable store would.
type failingAppends struct {
	store.EventStore
	fail atomic.Bool
}

var errUnavailable = errors.New("store unavailable")

func (s *failingAppends) Append(ctx context.Context, runID string, expected uint64, events ...event.Event) (uint64, error) {
	if _, ok := events[0].Payload.(*event.StepCompleted); ok && s.fail.Load() {
		return 0, errUnavailable
	}
	return s.EventStore.Append(ctx, runID, expected, events...)
}

// A drive whose result append fails stops with the error and leaves no uncommitted event in the
// engine's cache: driving the run again runs the step again (at least once) and completes it.
// (Pipelined, the second step may also have started ahead of the failed commit: see
// TestPipelinedFailedAppend.)
func TestFailedResultAppendLeavesNoTrace(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	b := setup(t, sequentialSteps(2, &runs))
	st := &failingAppends{EventStore: memstore.New()}
	e := b.engineWith(t, engine.Config{Store: st, SerialCommits: true})
	runID := b.start(t, e, "seq")
	st.fail.Store(true)
	_, err := e.Drive(t.Context(), runID, 0)
	require.ErrorIs(t, err, errUnavailable)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeStepScheduled}, typesOf(load(t, st, runID)))

	st.fail.Store(false)
	res, err := e.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.EqualValues(t, 3, runs.Load(), "the first step ran again, then the second")
}
