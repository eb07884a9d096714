package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// A sleep that falls due is handed to the run's worker, which fires it in one commit with the
// run's next decision: the scheduler appends nothing to the run (its grace period here is long
// enough never to pass), and the run ends on time. (The worker holds no run here.)
func TestWorkersFireTheirRunsTimers(t *testing.T) {
	t.Parallel()
	const nap = 300 * time.Millisecond
	srv := natstest.RunJetStream(t)
	startHistoryAndIngress(t, srv)
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "napper", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.Fired("nap") {
			return ctx.Complete("rested"), nil
		}
		return ctx.Sleep("nap", nap), nil
	})
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet, HoldTimers: -1}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: quiet, HandOffGrace: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, s.Stop()) })
	c, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	const runs = 5
	for i := range runs {
		_, err := c.Start(ctx, "napper", nil, &flow.StartOptions{RunID: fmt.Sprintf("nap-%d", i)})
		require.NoError(t, err)
	}
	for i := range runs {
		runID := fmt.Sprintf("nap-%d", i)
		var out string
		require.NoError(t, c.Result(ctx, runID, &out))
		hist, err := c.History(ctx, runID, 0)
		require.NoError(t, err)
		require.Empty(t, core.Check(runID, hist))
		require.Len(t, hist, 4)
		scheduled, fired, completed := hist[1], hist[2], hist[3]
		require.Equal(t, event.TypeWaitFired, fired.Type())
		require.Equal(t, event.TypeRunCompleted, completed.Type())
		require.Equal(t, fired.Time, completed.Time, "the firing and the run's end are one commit")
		require.False(t, fired.Time.Before(scheduled.Payload.(*event.WaitScheduled).Deadline), "never fired before it is due")
	}
	require.EqualValues(t, runs, s.HandedOff())
	require.Zero(t, s.Fired(), "the scheduler fired nothing itself")
}

// A worker that drove a run to a sleep due within HoldTimers keeps the run, with its task but
// without its run slot, and fires the sleep itself when due: runs complete with no scheduler
// at all, more of them at once than the worker has run slots.
func TestWorkersHoldRunsForTimersDueSoon(t *testing.T) {
	t.Parallel()
	const nap = 300 * time.Millisecond
	srv := natstest.RunJetStream(t)
	startHistoryAndIngress(t, srv)
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "napper", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.Fired("nap") {
			return ctx.Complete("rested"), nil
		}
		return ctx.Sleep("nap", nap), nil
	})
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet, RunConcurrency: 2}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	c, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	const runs = 8
	for i := range runs {
		_, err := c.Start(ctx, "napper", nil, &flow.StartOptions{RunID: fmt.Sprintf("held-%d", i)})
		require.NoError(t, err)
	}
	for i := range runs {
		runID := fmt.Sprintf("held-%d", i)
		var out string
		require.NoError(t, c.Result(ctx, runID, &out))
		hist, err := c.History(ctx, runID, 0)
		require.NoError(t, err)
		require.Empty(t, core.Check(runID, hist))
		require.Len(t, hist, 4)
		scheduled, fired, completed := hist[1], hist[2], hist[3]
		require.Equal(t, fired.Time, completed.Time, "the firing and the run's end are one commit")
		require.False(t, fired.Time.Before(scheduled.Payload.(*event.WaitScheduled).Deadline), "never fired before it is due")
	}
}
