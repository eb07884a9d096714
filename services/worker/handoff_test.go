package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// nap is how long the runs of napStack's workflow "napper" sleep.
const nap = 300 * time.Millisecond

// napStack starts a history service, an ingress and a worker of cfg serving "napper", which
// sleeps nap then completes, and returns a client and the server.
func napStack(t *testing.T, cfg worker.Config) (*flow.Client, *natsserver.Server) {
	t.Helper()
	srv := natstest.RunJetStream(t)
	startHistoryAndIngress(t, srv)
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "napper", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.Fired("nap") {
			return ctx.Complete("rested"), nil
		}
		return ctx.Sleep("nap", nap), nil
	})
	cfg.Conn, cfg.Logger = natstest.Connect(t, srv), quiet
	w, err := worker.New(cfg, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	c, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	return c, srv
}

// napRuns starts n runs of "napper" named prefix-<i> and checks that each ends with its sleep
// fired in one commit with the run's end, never before it was due.
func napRuns(t *testing.T, c *flow.Client, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range n {
		_, err := c.Start(ctx, "napper", nil, &flow.StartOptions{RunID: fmt.Sprintf("%s-%d", prefix, i)})
		require.NoError(t, err)
	}
	for i := range n {
		runID := fmt.Sprintf("%s-%d", prefix, i)
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
}

// A sleep that falls due is handed to the run's worker, which fires it in one commit with the
// run's next decision: the scheduler appends nothing to the run (its grace period here is long
// enough never to pass), and the run ends on time. (The worker holds no run here.)
func TestWorkersFireTheirRunsTimers(t *testing.T) {
	t.Parallel()
	c, srv := napStack(t, worker.Config{HoldTimers: -1})
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: quiet, HandOffGrace: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, s.Stop()) })

	const runs = 5
	napRuns(t, c, "nap", runs)
	require.EqualValues(t, runs, s.HandedOff())
	require.Zero(t, s.Fired(), "the scheduler fired nothing itself")
}

// A worker that drove a run to a sleep due within HoldTimers keeps the run, with its task but
// without its run slot, and fires the sleep itself when due: runs complete with no scheduler
// at all, more of them at once than the worker has run slots.
func TestWorkersHoldRunsForTimersDueSoon(t *testing.T) {
	t.Parallel()
	c, _ := napStack(t, worker.Config{RunConcurrency: 2})
	napRuns(t, c, "held", 8)
}
