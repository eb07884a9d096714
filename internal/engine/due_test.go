package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/store/memstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// napper sleeps under wait "nap" for d, then completes.
func napper(d time.Duration) func(reg *flow.Registry) {
	return func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			if ctx.Fired("nap") {
				return ctx.Complete("rested"), nil
			}
			return ctx.Sleep("nap", d), nil
		})
	}
}

// A drive that finds its run's wait due fires it itself, in one commit with the decision that
// follows; the scheduler's firing, coming after, finds the timer moot and appends nothing.
func TestDriveFiresADueWaitWithTheNextDecision(t *testing.T) {
	t.Parallel()
	for _, serial := range []bool{false, true} {
		t.Run(map[bool]string{false: "pipelined", true: "serial"}[serial], func(t *testing.T) {
			t.Parallel()
			b := setup(t, napper(time.Hour))
			st := &commitLog{EventStore: memstore.New()}
			clock := newTestClock(t0)
			worker := b.engineWith(t, engine.Config{Store: st, Clock: clock, SerialCommits: serial})
			timer := suspended(t, b, worker)

			clock.Advance(time.Hour - time.Millisecond)
			res, err := worker.DriveTask(t.Context(), engine.Task{RunID: timer.RunID, Seq: 2})
			require.NoError(t, err)
			require.Equal(t, core.StatusSuspended, res.Status, "a wait is never fired before it is due")

			clock.Advance(time.Millisecond)
			res, err = worker.DriveTask(t.Context(), engine.Task{RunID: timer.RunID, Seq: 2})
			require.NoError(t, err)
			require.Equal(t, core.StatusCompleted, res.Status)
			require.Equal(t, [][]event.Type{{event.TypeRunStarted}, {event.TypeWaitScheduled},
				{event.TypeWaitFired, event.TypeRunCompleted}}, st.commits)
			hist := load(t, st, timer.RunID)
			require.Equal(t, timer.Due, hist[2].Time, "fired when due, not before")

			require.NoError(t, schedulerEngine(t, b, st).Fire(t.Context(), timer))
			require.Len(t, load(t, st, timer.RunID), 4, "a timer fires once")
		})
	}
}

// A drive that would end with its run's wait falling due within HoldTimers waits for it and
// fires it, rather than hand the run back to the scheduler; with holds off it ends.
func TestDriveHoldsAWaitDueInAMoment(t *testing.T) {
	t.Parallel()
	b := setup(t, napper(20*time.Millisecond))
	st := &commitLog{EventStore: memstore.New()}
	worker := b.engineWith(t, engine.Config{Store: st})
	runID := b.start(t, worker, "wf")
	res, err := worker.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.Equal(t, [][]event.Type{{event.TypeRunStarted}, {event.TypeWaitScheduled},
		{event.TypeWaitFired, event.TypeRunCompleted}}, st.commits)
	hist := load(t, st, runID)
	require.False(t, hist[2].Time.Before(hist[1].Payload.(*event.WaitScheduled).Deadline))

	unheld := b.engineWith(t, engine.Config{Store: memstore.New(), HoldTimers: -1})
	runID = b.start(t, unheld, "wf")
	res, err = unheld.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, res.Status)
}

// A step's retry backoff that falls due while the run's other steps run is fired by the drive,
// which then runs the next attempt: one drive takes the run from its start to its end.
func TestDriveFiresARetryDueWhileStepsRun(t *testing.T) {
	t.Parallel()
	var flaky atomic.Int32
	release := make(chan struct{})
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			_, ok1, err1 := flow.Output[bool](ctx, "flaky")
			_, ok2, err2 := flow.Output[bool](ctx, "slow")
			if err := errors.Join(err1, err2); err != nil {
				return nil, err
			}
			if ok1 && ok2 {
				return ctx.Complete("done"), nil
			}
			retry := &flow.RetryPolicy{MaxAttempts: 2, InitialInterval: 30 * time.Millisecond}
			return ctx.ScheduleSteps(flow.Step{ID: "flaky", Name: "flaky", Retry: retry}, flow.Step{ID: "slow", Name: "slow"}), nil
		})
		flow.RegisterStep(reg, "flaky", func(context.Context, any) (bool, error) {
			if flaky.Add(1) == 1 {
				return false, errors.New("first attempt fails")
			}
			close(release)
			return true, nil
		})
		flow.RegisterStep(reg, "slow", func(ctx context.Context, _ any) (bool, error) {
			select {
			case <-release:
				return true, nil
			case <-ctx.Done():
				return false, ctx.Err()
			}
		})
	})
	st := &commitLog{EventStore: memstore.New()}
	worker := b.engineWith(t, engine.Config{Store: st, HoldTimers: -1})
	runID := b.start(t, worker, "wf")
	res, err := worker.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.EqualValues(t, 2, flaky.Load())
	fired := false
	for _, e := range load(t, st, runID) {
		if r, ok := e.Payload.(*event.StepRetryFired); ok {
			fired = true
			require.Equal(t, "flaky", r.StepID)
		}
	}
	require.True(t, fired, "the drive fired the retry itself")
}
