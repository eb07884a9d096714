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

// A drive that waits in place for its run's timer releases its run slot (Task.Release), once;
// past HoldMax drives waiting at once, a drive ends instead.
func TestHoldingDriveReleasesItsSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, napper(30*time.Millisecond))
	worker := b.engineWith(t, engine.Config{Store: memstore.New(), HoldTimers: time.Second, HoldMax: 1})
	var released atomic.Int32
	runID := b.start(t, worker, "wf")
	res, err := worker.DriveTask(t.Context(), engine.Task{RunID: runID, Seq: 1, Release: func() { released.Add(1) }})
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.EqualValues(t, 1, released.Load())

	// One drive holds; a second, past HoldMax, ends with its run suspended.
	long := setup(t, napper(500*time.Millisecond))
	e := long.engineWith(t, engine.Config{Store: memstore.New(), HoldTimers: time.Second, HoldMax: 1})
	first, second := long.start(t, e, "wf"), long.start(t, e, "wf")
	holding := make(chan struct{})
	done := make(chan engine.Result, 1)
	go func() {
		res, err := e.DriveTask(t.Context(), engine.Task{RunID: first, Seq: 1, Release: func() { close(holding) }})
		require.NoError(t, err)
		done <- res
	}()
	<-holding
	res, err = e.DriveTask(t.Context(), engine.Task{RunID: second, Seq: 1})
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, res.Status, "past HoldMax a drive ends")
	require.Equal(t, core.StatusCompleted, (<-done).Status)
}

// A task that hands off a timer that already fired needs no drive: with the run cached or
// ended in this engine, it reads nothing.
func TestHandedOffTimerThatFiredNeedsNoDrive(t *testing.T) {
	t.Parallel()
	b := setup(t, napper(time.Hour))
	st := &readCounter{EventStore: memstore.New()}
	clock := newTestClock(t0)
	worker := b.engineWith(t, engine.Config{Store: st, Clock: clock})
	timer := suspended(t, b, worker)
	clock.Advance(time.Hour)
	res, err := worker.DriveTask(t.Context(), engine.Task{RunID: timer.RunID, Seq: 2})
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)

	reads := st.reads.Load()
	handOff := engine.Task{RunID: timer.RunID, Seq: 2, Nonce: "due." + timer.Key()}
	res, err = worker.DriveTask(t.Context(), handOff)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.Equal(t, reads, st.reads.Load(), "an ended run's hand-off reads nothing")

	// Another engine reads the run, finds the timer fired, and drives nothing.
	other := b.engineWith(t, engine.Config{Store: st, Clock: clock})
	res, err = other.DriveTask(t.Context(), handOff)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.Len(t, load(t, st, timer.RunID), 4)
}

// A task whose nonce does not hand off a timer (a parked run's dispatch, "d<rev>") is driven as
// any task is.
func TestOtherNoncesAreDriven(t *testing.T) {
	t.Parallel()
	b := setup(t, napper(time.Hour))
	clock := newTestClock(t0)
	worker := b.engineWith(t, engine.Config{Store: memstore.New(), Clock: clock})
	timer := suspended(t, b, worker)
	clock.Advance(time.Hour)
	res, err := worker.DriveTask(t.Context(), engine.Task{RunID: timer.RunID, Seq: 2, Nonce: "d42"})
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
}

// A hand-off task for a run whose driver holds it joins that driver without waking it to read
// the run: the driver fires the timer itself.
func TestHandOffJoinsAHoldingDriverQuietly(t *testing.T) {
	t.Parallel()
	b := setup(t, napper(200*time.Millisecond))
	st := &readCounter{EventStore: memstore.New()}
	worker := b.engineWith(t, engine.Config{Store: st, HoldTimers: time.Second})
	runID := b.start(t, worker, "wf")
	holding := make(chan struct{})
	done := make(chan engine.Result, 1)
	go func() {
		res, err := worker.DriveTask(t.Context(), engine.Task{RunID: runID, Seq: 1, Release: func() { close(holding) }})
		require.NoError(t, err)
		done <- res
	}()
	<-holding
	reads := st.reads.Load()
	require.True(t, worker.Join(engine.Task{RunID: runID, Seq: 2, Nonce: "due.wait.nap"}))
	require.Equal(t, core.StatusCompleted, (<-done).Status)
	require.Equal(t, reads, st.reads.Load(), "the holding driver read nothing more")
	require.False(t, worker.Join(engine.Task{RunID: runID, Seq: 2, Nonce: "due.wait.nap"}), "no driver is active now")
}
