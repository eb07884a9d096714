package engine_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store/memstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// heldFirstResult holds the first append that records a step result until hold is closed.
type heldFirstResult struct {
	commitLog
	once sync.Once
	hold chan struct{}
}

func (s *heldFirstResult) Append(ctx context.Context, runID string, expected uint64, events ...event.Event) (uint64, error) {
	if _, ok := events[0].Payload.(*event.StepCompleted); ok {
		s.once.Do(func() { <-s.hold })
	}
	return s.commitLog.Append(ctx, runID, expected, events...)
}

// While a run's commit is in flight its driver goes on: the step that commit schedules runs, its
// result and the decision on it are buffered, the next step runs, and so on; what was buffered
// is appended as one commit chained on the acknowledged one. The first step waits for its
// schedule's ack: until one of its appends is acknowledged, a driver may not own the run's tail.
func TestPipelinedStepsShareAnAppend(t *testing.T) {
	t.Parallel()
	const n = 5
	st := &heldFirstResult{commitLog: commitLog{EventStore: memstore.New()}, hold: make(chan struct{})}
	var runs atomic.Int32
	b := setup(t, func(reg *flow.Registry) {
		registerSeq(reg, n)
		flow.RegisterStep(reg, "inc", func(_ context.Context, v int) (int, error) {
			runs.Add(1)
			if v == n-1 {
				close(st.hold) // the last step ran while the first result's append was held
			}
			return v + 1, nil
		})
	})
	e := b.engineOn(t, st, nil)
	runID := b.start(t, e, "seq")
	res, err := e.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.Equal(t, [][]event.Type{
		{event.TypeRunStarted},
		{event.TypeStepScheduled},
		{event.TypeStepCompleted, event.TypeStepScheduled},
		{event.TypeStepCompleted, event.TypeStepScheduled, event.TypeStepCompleted, event.TypeStepScheduled,
			event.TypeStepCompleted, event.TypeStepScheduled, event.TypeStepCompleted, event.TypeRunCompleted},
	}, st.commits)
	require.EqualValues(t, n, runs.Load())
	hist := load(t, st, runID)
	require.JSONEq(t, strconv.Itoa(n), string(hist[len(hist)-1].Payload.(*event.RunCompleted).Output))
	_, err = core.Replay(runID, hist, sdk.RuntimeOf(b.reg).Replaying(), core.DecideOptions{})
	require.NoError(t, err)
}

// A pipelined append that conflicts with another writer (a signal) reads the run again: the
// result whose step's schedule was acknowledged is recorded again without running the step, and
// the step started ahead of the refused commit is dropped and runs again on what was committed.
func TestPipelinedConflictRecordsAcknowledgedResultsAgain(t *testing.T) {
	t.Parallel()
	var runsA, runsB atomic.Int32
	bStarted := make(chan struct{})
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			a, ok, err := flow.Output[int](ctx, "a")
			if err != nil || !ok {
				return ctx.ScheduleStep("a", "a", 1), err
			}
			if _, ok, err := flow.Output[int](ctx, "b"); err != nil || !ok {
				return ctx.ScheduleStep("b", "b", a), err
			}
			v, ok, err := flow.SignalValue[int](ctx, "go")
			if err != nil || !ok {
				return ctx.AwaitSignal("go", "go"), err
			}
			return ctx.Complete(v), nil
		})
		flow.RegisterStep(reg, "a", func(_ context.Context, v int) (int, error) {
			runsA.Add(1)
			return v + 1, nil
		})
		flow.RegisterStep(reg, "b", func(_ context.Context, v int) (int, error) {
			if runsB.Add(1) == 1 {
				close(bStarted)
			}
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
			<-bStarted // b started ahead of the commit that schedules it
			_, err := other.Signal(context.Background(), runID, "go", []byte(`7`), "d-1")
			require.NoError(t, err)
		}
	}
	res, err := worker.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.EqualValues(t, 1, runsA.Load(), "a's result was recorded again, a did not run again")
	require.EqualValues(t, 2, runsB.Load(), "b ran ahead of the refused commit, then on the committed one")
	hist := load(t, st, runID)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeStepScheduled, event.TypeSignalReceived,
		event.TypeStepCompleted, event.TypeStepScheduled, event.TypeStepCompleted, event.TypeSignalAwaited, event.TypeRunCompleted}, typesOf(hist))
	_, err = core.Replay(runID, hist, sdk.RuntimeOf(b.reg).Replaying(), core.DecideOptions{})
	require.NoError(t, err)
}

// A pipelined append that fails (an unavailable store) stops the drive with the error and leaves
// nothing uncommitted in the cache; driving the run again completes it, each step having run at
// least once.
func TestPipelinedFailedAppend(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	b := setup(t, sequentialSteps(2, &runs))
	st := &failingAppends{EventStore: memstore.New()}
	e := b.engineOn(t, st, nil)
	runID := b.start(t, e, "seq")
	st.fail.Store(true)
	_, err := e.Drive(t.Context(), runID, 0)
	require.ErrorIs(t, err, errUnavailable)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeStepScheduled}, typesOf(load(t, st, runID)))
	first := runs.Load()

	st.fail.Store(false)
	res, err := e.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.GreaterOrEqual(t, runs.Load()-first, int32(2), "both steps ran after the failure")
	hist := load(t, st, runID)
	_, err = core.Replay(runID, hist, sdk.RuntimeOf(b.reg).Replaying(), core.DecideOptions{})
	require.NoError(t, err)
}
