package history_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/timerindex"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
)

// reconcileEnv starts a history service without a reconciler in the background (the tests'
// passes are the only ones), an ingress and a worker of registry("") and of "limited", under
// flow control (at most 1 running); no scheduler, so controlled runs stay queued.
func reconcileEnv(t *testing.T) (*natsserver.Server, *history.Service, *flow.Client) {
	t.Helper()
	srv := natstest.RunJetStream(t)
	reg := registry("")
	flow.RegisterWorkflow(reg, "limited", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		return ctx.Complete("done"), nil
	}, flow.WithFlowControl(flow.FlowControl{Concurrency: 1}))
	h, c := startEnv(t, srv, history.Config{ReconcileInterval: -1}, reg)
	return srv, h, c
}

// The reconciler recomputes the state the history service owns from history and repairs what
// drifted, counting each repair: a run waiting for admission that lost its queue entry gets it
// back, an entry of a run that no longer waits is deleted, and a runs index entry that lags its
// run's end is derived again.
func TestReconcilerRepairsDrift(t *testing.T) {
	t.Parallel()
	srv, h, c := reconcileEnv(t)
	ctx := t.Context()
	js := natstest.JetStream(t, srv)
	queue, err := js.KeyValue(ctx, streams.QueueBucket)
	require.NoError(t, err)
	runs, err := js.KeyValue(ctx, streams.RunsBucket)
	require.NoError(t, err)

	timers, err := js.KeyValue(ctx, streams.TimersBucket)
	require.NoError(t, err)
	_, err = c.Start(ctx, "nap", time.Hour, &flow.StartOptions{RunID: "n-1"})
	require.NoError(t, err)
	napKey := timerindex.Key(core.Timer{RunID: "n-1", Kind: core.TimerWait, ID: "nap"})
	require.Eventually(t, func() bool { _, err := timers.Get(ctx, napKey); return err == nil }, 20*time.Second, 5*time.Millisecond)
	_, err = c.Start(ctx, "limited", nil, &flow.StartOptions{RunID: "q-1"})
	require.NoError(t, err)
	_, err = c.Start(ctx, "steps", 1, &flow.StartOptions{RunID: "s-1"})
	require.NoError(t, err)
	var out int
	require.NoError(t, c.Result(ctx, "s-1", &out))
	require.Eventually(t, func() bool {
		sum, ok := h.IndexedEntry("q-1")
		_, qerr := queue.Get(ctx, "q-1")
		done, ok2 := h.IndexedEntry("s-1")
		return ok && sum.Status == core.StatusQueued && qerr == nil && ok2 && done.Status == core.StatusCompleted
	}, 20*time.Second, 5*time.Millisecond)

	// Drift: q-1 loses its entry; the ended s-1 gets one; s-1's index entry goes back in time;
	// n-1 loses its timer entry, and the ended s-1 gets one.
	require.NoError(t, queue.Delete(ctx, "q-1"))
	require.NoError(t, timers.Delete(ctx, napKey))
	_, err = timers.Put(ctx, "s-1.wait.ghost", []byte(`{"run_id":"s-1","kind":"wait","id":"ghost","due":"2026-01-01T00:00:00Z"}`))
	require.NoError(t, err)
	bogus, err := json.Marshal(limits.Waiting{RunID: "s-1", Definition: "steps", Control: &event.FlowControl{Group: "steps", Concurrency: 1}})
	require.NoError(t, err)
	_, err = queue.Put(ctx, "s-1", bogus)
	require.NoError(t, err)
	e, err := runs.Get(ctx, "s-1")
	require.NoError(t, err)
	var sum core.Summary
	require.NoError(t, json.Unmarshal(e.Value(), &sum))
	sum.Status, sum.Seq = core.StatusRunning, 1
	b, err := json.Marshal(sum)
	require.NoError(t, err)
	_, err = runs.Update(ctx, "s-1", b, e.Revision())
	require.NoError(t, err)
	require.Eventually(t, func() bool { s, ok := h.IndexedEntry("s-1"); return ok && s.Status == core.StatusRunning },
		10*time.Second, 5*time.Millisecond)

	before := metrics.Repairs(metrics.StateQueue) + metrics.Repairs(metrics.StateRunsIndex)
	done, err := h.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, done[metrics.StateQueue], "q-1's entry written, s-1's deleted")
	require.Equal(t, 1, done[metrics.StateRunsIndex], "s-1's entry derived again")
	require.Equal(t, 2, done[metrics.StateTimers], "n-1's timer registered again, s-1's deleted")
	_, err = timers.Get(ctx, napKey)
	require.NoError(t, err)
	_, err = timers.Get(ctx, "s-1.wait.ghost")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	require.Equal(t, before+3, metrics.Repairs(metrics.StateQueue)+metrics.Repairs(metrics.StateRunsIndex))
	_, err = queue.Get(ctx, "q-1")
	require.NoError(t, err)
	_, err = queue.Get(ctx, "s-1")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	require.Eventually(t, func() bool { s, ok := h.IndexedEntry("s-1"); return ok && s.Status == core.StatusCompleted },
		10*time.Second, 5*time.Millisecond)

	// Nothing drifted: a second pass repairs nothing.
	done, err = h.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, done[metrics.StateQueue]+done[metrics.StateRunsIndex]+done[metrics.StateTimers])
}

// A run waiting for admission that is paused (its runs index entry says paused) and lost its
// queue entry gets it back from the reconciler, as a queued one does.
func TestReconcilerRepairsAPausedQueuedRun(t *testing.T) {
	t.Parallel()
	srv, h, c := reconcileEnv(t)
	ctx := t.Context()
	queue, err := natstest.JetStream(t, srv).KeyValue(ctx, streams.QueueBucket)
	require.NoError(t, err)
	_, err = c.Start(ctx, "limited", nil, &flow.StartOptions{RunID: "p-1"})
	require.NoError(t, err)
	_, err = c.Pauses().PauseRun(ctx, "p-1", nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		sum, ok := h.IndexedEntry("p-1")
		_, qerr := queue.Get(ctx, "p-1")
		return ok && sum.Status == core.StatusPaused && qerr == nil
	}, 20*time.Second, 5*time.Millisecond)

	require.NoError(t, queue.Delete(ctx, "p-1"))
	done, err := h.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, done[metrics.StateQueue], "p-1's entry written")
	_, err = queue.Get(ctx, "p-1")
	require.NoError(t, err)
}
