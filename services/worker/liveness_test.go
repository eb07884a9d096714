package worker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/liveness"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/worker"
)

// startServices starts the history service and the scheduler on srv, stopped on cleanup.
func startServices(t *testing.T, srv *natsserver.Server) {
	t.Helper()
	startHistoryAndIngress(t, srv)
	startScheduler(t, natstest.Connect(t, srv))
}

// twoSteps registers workflow name: two steps in a row, then it completes with its input.
func twoSteps(name string) *flow.Registry {
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, name, func(ctx *flow.Context, n int) (flow.Decision, error) {
		for _, id := range []string{"one", "two"} {
			if ctx.StepOutput(id) == nil {
				return ctx.ScheduleStep(id, name+"-echo", n), nil
			}
		}
		return ctx.Complete(ctx.StepOutput("two")), nil
	})
	flow.RegisterStep(reg, name+"-echo", func(_ context.Context, n int) (int, error) { return n, nil })
	return reg
}

// startWorker starts a worker of reg on srv's default queue, with its own connection; Stop on
// cleanup (a second Stop is a no-op).
func startWorker(t *testing.T, srv *natsserver.Server, reg *flow.Registry) *worker.Worker {
	t.Helper()
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w
}

func watch(t *testing.T, srv *natsserver.Server) *liveness.View {
	t.Helper()
	v, err := liveness.Watch(t.Context(), natstest.JetStream(t, srv), quiet)
	require.NoError(t, err)
	t.Cleanup(v.Stop)
	return v
}

// Two workers with disjoint definitions share one queue (and its consumer): each hands the
// other's tasks back instead of parking them, and no run records a failed decision.
func TestDisjointDefinitionsOnOneQueue(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startServices(t, srv)
	startWorker(t, srv, twoSteps("alpha"))
	startWorker(t, srv, twoSteps("beta"))
	client, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()

	const n = 100
	type result struct {
		runID string
		err   error
	}
	results := make(chan result, 2*n)
	for i := range n {
		for _, def := range []string{"alpha", "beta"} {
			go func() {
				runID, err := client.Start(ctx, def, i, &flow.StartOptions{RunID: fmt.Sprintf("%s-%d", def, i)})
				if err == nil {
					var out int
					err = client.Result(ctx, runID, &out)
					if err == nil && out != i {
						err = fmt.Errorf("run %s: got %d, want %d", runID, out, i)
					}
				}
				results <- result{runID, err}
			}()
		}
	}
	var ids []string
	for range 2 * n {
		r := <-results
		require.NoError(t, r.err)
		ids = append(ids, r.runID)
	}
	for _, runID := range ids {
		hist, err := client.History(ctx, runID, 0)
		require.NoError(t, err)
		for _, e := range hist {
			require.NotEqual(t, event.TypeDecisionFailed, e.Type(), "run %s, seq %d", runID, e.Seq)
		}
		require.Equal(t, event.TypeRunCompleted, hist[len(hist)-1].Type())
	}
	parked, err := natstest.JetStream(t, srv).KeyValue(ctx, streams.ParkedBucket)
	require.NoError(t, err)
	keys, err := parked.ListKeys(ctx)
	require.NoError(t, err)
	var parkedRuns []string
	for k := range keys.Keys() {
		parkedRuns = append(parkedRuns, k)
	}
	require.Empty(t, parkedRuns, "no run was parked")
}

// A definition whose only worker stopped is served by no one at once; one whose only worker
// died without stopping, once its entry's TTL passed.
func TestDefinitionOfAGoneWorkerIsNotServed(t *testing.T) {
	t.Parallel()
	t.Run("Stopped", func(t *testing.T) {
		t.Parallel()
		srv := natstest.RunJetStream(t) // the default TTL: 15s
		startServices(t, srv)
		v := watch(t, srv)
		w := startWorker(t, srv, twoSteps("alpha"))
		client, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
		require.NoError(t, err)
		before, err := client.Start(t.Context(), "alpha", 1, &flow.StartOptions{RunID: "alpha-before"})
		require.NoError(t, err)
		require.NoError(t, client.Result(t.Context(), before, nil))
		require.Eventually(t, func() bool { _, err := v.Require(streams.DefaultQueue, "alpha"); return err == nil },
			10*time.Second, 5*time.Millisecond)
		kv, err := natstest.JetStream(t, srv).KeyValue(t.Context(), streams.WorkersBucket)
		require.NoError(t, err)
		entry, err := kv.Get(t.Context(), liveness.Key(streams.DefaultQueue, w.ID()))
		require.NoError(t, err)
		require.Contains(t, string(entry.Value()), `"definition":"alpha"`)

		require.NoError(t, w.Stop(context.Background()))
		_, err = kv.Get(t.Context(), liveness.Key(streams.DefaultQueue, w.ID()))
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "Stop deleted the entry")
		start := time.Now()
		require.Eventually(t, func() bool {
			_, err := v.Require(streams.DefaultQueue, "alpha")
			return errors.Is(err, liveness.ErrNoWorker)
		}, 5*time.Second, 5*time.Millisecond, "well before the TTL")
		require.Less(t, time.Since(start), v.TTL())
		_, err = v.Require(streams.DefaultQueue, "alpha")
		require.ErrorContains(t, err, `no live worker serves workflow "alpha" on queue "default" (last worker seen `)

		// As documented: a new start is refused, with the reason; a retried start of a run
		// accepted before returns it.
		_, err = client.Start(t.Context(), "alpha", 1, &flow.StartOptions{RunID: "alpha-after"})
		require.ErrorIs(t, err, flow.ErrNoWorker)
		require.ErrorContains(t, err, `no live worker serves workflow "alpha" on queue "default" (last worker seen `)
		again, err := client.Start(t.Context(), "alpha", 1, &flow.StartOptions{RunID: "alpha-before"})
		require.NoError(t, err)
		require.Equal(t, before, again)
		_, err = client.Start(t.Context(), "alpha", 2, &flow.StartOptions{RunID: "alpha-before"})
		require.ErrorIs(t, err, flow.ErrRunExists)
	})
	t.Run("Crashed", func(t *testing.T) {
		t.Parallel()
		srv := natstest.RunJetStream(t)
		require.NoError(t, streams.Ensure(t.Context(), natstest.JetStream(t, srv), streams.Config{WorkerTTL: time.Second}))
		v := watch(t, srv)
		nc := natstest.Connect(t, srv)
		w, err := worker.New(worker.Config{Conn: nc, Logger: quiet}, twoSteps("alpha"))
		require.NoError(t, err)
		require.NoError(t, w.Start(t.Context()))
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		require.Eventually(t, func() bool { _, err := v.Require(streams.DefaultQueue, "alpha"); return err == nil },
			10*time.Second, 5*time.Millisecond)
		nc.Close() // the worker's process dies: no heartbeat, no delete

		require.Eventually(t, func() bool {
			_, err := v.Require(streams.DefaultQueue, "alpha")
			return errors.Is(err, liveness.ErrNoWorker)
		}, 10*time.Second, 10*time.Millisecond)
		kv, err := natstest.JetStream(t, srv).KeyValue(t.Context(), streams.WorkersBucket)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			_, err := kv.Get(t.Context(), liveness.Key(streams.DefaultQueue, w.ID()))
			return errors.Is(err, jetstream.ErrKeyNotFound)
		}, 10*time.Second, 10*time.Millisecond, "the entry expired")
	})
}

// A run of a definition no live worker serves is parked, with nothing written to its history,
// and dispatched again when a worker that registers the definition starts.
func TestParkedRunResumesWhenItsWorkerComesBack(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startServices(t, srv)
	startWorker(t, srv, twoSteps("alpha"))
	beta := startWorker(t, srv, twoSteps("beta"))
	require.NoError(t, beta.Stop(context.Background())) // beta stays registered in FLOW_DEFINITIONS
	client, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	runID := ingresstest.Accepted(t, natstest.Connect(t, srv), "beta", "beta-unserved", 7, "") // started while beta lived
	parked, err := natstest.JetStream(t, srv).KeyValue(ctx, streams.ParkedBucket)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := parked.Get(ctx, runID); return err == nil }, 20*time.Second, 10*time.Millisecond,
		"the alpha worker parks the run")
	hist, err := client.History(ctx, runID, 0)
	require.NoError(t, err)
	require.Len(t, hist, 1, "nothing was recorded")

	startWorker(t, srv, twoSteps("beta"))
	var out int
	require.NoError(t, client.Result(ctx, runID, &out))
	require.Equal(t, 7, out)
	require.Eventually(t, func() bool { _, err := parked.Get(ctx, runID); return errors.Is(err, jetstream.ErrKeyNotFound) },
		20*time.Second, 10*time.Millisecond, "the dispatch removed the parked entry")
}
