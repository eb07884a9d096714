package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	hbstore "github.com/flowrun/flow/internal/heartbeats"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/worker"
)

// An attempt whose step the workflow abandoned keeps heartbeating after its run completed, and
// its heartbeats (and its worker's refresher) never tell it it is cancelled: the heartbeat's
// answer checks the abandonment before the run's end (docs/cancellation.md, docs/timeouts.md).
func TestAbandonedStepHeartbeatsAfterRunEnds(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startServices(t, srv)
	running, cancelled, returned, release := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	var cause error // the step's context's cause as it returned; read after returned is closed
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "abandoning", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.Snapshot().Steps["beat"] == nil {
			// A heartbeat timeout of 10 s: the worker writes and asks every second, and the
			// scheduler's watcher does not time the attempt out under load.
			return ctx.ScheduleStep("beat", "beat", nil, flow.WithHeartbeatTimeout(10*time.Second)), nil
		}
		if ctx.Signal("stop") == nil {
			return ctx.AwaitSignal("stop", "stop"), nil
		}
		if !ctx.StepSettled("beat") {
			return ctx.CancelStep("beat", flow.Abandon), nil
		}
		return ctx.Complete("abandoned"), nil
	})
	flow.RegisterStep(reg, "beat", func(ctx context.Context, _ any) (string, error) {
		close(running)
		defer close(returned)
		for i := 0; ; i++ {
			_ = flow.Heartbeat(ctx, progress{Done: i})
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
				close(cancelled)
				return "", ctx.Err()
			case <-release:
				cause = context.Cause(ctx)
				return "finished", nil
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	startWorkerWith(t, srv, reg, worker.Config{})
	c := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	runID, err := c.Start(ctx, "abandoning", nil, &flow.StartOptions{RunID: "abandon-beat-1"})
	require.NoError(t, err)
	<-running
	historyUntil(t, c, runID, 30*time.Second, "the run awaits signal stop", func(h []event.Envelope) bool {
		return last[*event.SignalAwaited](h) != nil
	})
	_, err = c.Signal(ctx, runID, "stop", nil, &flow.DeliveryOptions{DeliveryID: "stop-1"})
	require.NoError(t, err)
	var out string
	require.NoError(t, c.Result(ctx, runID, &out), "the workflow goes on at once and completes")
	require.Equal(t, "abandoned", out)

	// Three writes of the step's heartbeat entry after the run ended: each write is followed
	// by a question to the run's history before the same goroutine (the step's Heartbeat or
	// the refresher) writes again, so at least one answer was given after the run ended.
	kv, err := natstest.JetStream(t, srv).KeyValue(ctx, streams.HeartbeatsBucket)
	require.NoError(t, err)
	key := hbstore.Key(runID, "beat")
	e, err := kv.Get(ctx, key)
	require.NoError(t, err)
	ended := e.Revision()
	for rev := ended; rev < ended+3; {
		select {
		case <-cancelled:
			require.FailNowf(t, "an abandoned attempt was told it is cancelled", "cause: %v", cause)
		case <-ctx.Done():
			require.FailNowf(t, "timed out", "the abandoned step's heartbeat entry stayed at revision %d (run ended at %d)", rev, ended)
		case <-time.After(50 * time.Millisecond):
		}
		if e, err := kv.Get(ctx, key); err == nil {
			rev = e.Revision()
		}
	}
	close(release)
	<-returned
	require.False(t, closed(cancelled), "an abandoned attempt was told it is cancelled: %v", cause)
	require.NoError(t, cause, "the abandoned attempt's context was cancelled")

	hist, err := c.History(ctx, runID, 0)
	require.NoError(t, err)
	require.Empty(t, core.Check(runID, hist))
	require.Equal(t, event.CancelAbandon, last[*event.StepCancelled](hist).Cancellation)
	require.NotContains(t, typeNames(hist), string(event.TypeStepCompleted), "the abandoned attempt's result is ignored")
}
