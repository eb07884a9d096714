package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

type testBundle struct {
	srv    *natsserver.Server
	client *flow.Client
}

var quiet = natstest.Logger()

// startHistoryAndIngress starts the history service (HTTP off) and an ingress on srv, stopped
// when t ends.
func startHistoryAndIngress(t *testing.T, srv *natsserver.Server) {
	t.Helper()
	startHistoryAndIngressOf(t, srv, ingress.Config{})
}

// startHistoryAndIngressOf is startHistoryAndIngress with the ingress configured by cfg (its
// connection and logger set here).
func startHistoryAndIngressOf(t *testing.T, srv *natsserver.Server, cfg ingress.Config) {
	t.Helper()
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	cfg.Conn, cfg.Logger = natstest.Connect(t, srv), quiet
	ingresstest.Start(t, cfg)
}

// startScheduler starts a scheduler on nc, stopped when t ends.
func startScheduler(t *testing.T, nc *nats.Conn) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(scheduler.Config{Conn: nc, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, s.Stop()) })
	return s
}

func setup(t *testing.T, register func(*flow.Registry)) *testBundle {
	t.Helper()
	srv := natstest.RunJetStream(t)
	startHistoryAndIngress(t, srv)
	reg := flow.NewRegistry(nil)
	register(reg)
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	startScheduler(t, natstest.Connect(t, srv))
	c, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	return &testBundle{srv: srv, client: c}
}

func TestExamplesEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, examples.Register)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	t.Run("Order", func(t *testing.T) {
		runID, err := b.client.Start(ctx, "order", nil, &flow.StartOptions{RunID: "order-2026-0001"})
		require.NoError(t, err)
		var out examples.OrderResult
		require.NoError(t, b.client.Result(ctx, runID, &out))
		require.Equal(t, "reserved 1 x sku-8842 (key order-2026-0001:reserve-stock:sku-8842)", out.Reservation)
		require.Contains(t, out.Charge, "charged 42.00")
		hist, err := b.client.History(ctx, runID, 0)
		require.NoError(t, err)
		require.Empty(t, core.Check(runID, hist))
		var types []string
		for _, e := range hist {
			types = append(types, string(e.Type()))
		}
		require.Contains(t, types, "step.retry_fired", "the first charge attempt timed out and was retried")
	})

	t.Run("Fanout", func(t *testing.T) {
		runID, err := b.client.Start(ctx, "fanout", map[string]int{"items": 20}, nil)
		require.NoError(t, err)
		var out map[string]int
		require.NoError(t, b.client.Result(ctx, runID, &out))
		require.Equal(t, map[string]int{"items": 20, "sum": 2470}, out)
	})

	t.Run("Reminder", func(t *testing.T) {
		runID, err := b.client.Start(ctx, "reminder", map[string]string{"who": "ann", "after": "300ms"}, nil)
		require.NoError(t, err)
		var out string
		require.NoError(t, b.client.Result(ctx, runID, &out))
		require.Contains(t, out, "reminded ann")
		s, err := b.client.Snapshot(ctx, runID)
		require.NoError(t, err)
		w := s.Waits["wait"]
		require.GreaterOrEqual(t, s.UpdatedAt.Sub(s.StartedAt), 300*time.Millisecond)
		require.True(t, w.Fired)
	})

	t.Run("UnknownDefinition", func(t *testing.T) {
		_, err := b.client.Start(ctx, "ordr", nil, nil)
		require.ErrorIs(t, err, flow.ErrNoWorker)
		require.ErrorContains(t, err, `no live worker serves workflow "ordr" on queue "default" (never registered; known on this queue: approval, child, fanout, invoice, order, parent, reminder, webhook)`)
	})

	t.Run("RunsIndex", func(t *testing.T) {
		require.Eventually(t, func() bool {
			page, err := b.client.Runs(ctx, nil)
			return err == nil && len(page.Runs) >= 3
		}, 10*time.Second, 10*time.Millisecond)
	})
}

func TestSignalsAndCancellation(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "approve", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			v, ok, err := flow.SignalValue[string](ctx, "decision")
			if err != nil || !ok {
				return ctx.AwaitSignal("decision", "approval"), err
			}
			return ctx.Complete(v), nil
		})
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	runID, err := b.client.Start(ctx, "approve", nil, nil)
	require.NoError(t, err)
	_, err = b.client.Signal(ctx, runID, "approval", "yes", &flow.DeliveryOptions{DeliveryID: "d-1"})
	require.NoError(t, err)
	_, err = b.client.Signal(ctx, runID, "approval", "yes", &flow.DeliveryOptions{DeliveryID: "d-1"})
	require.NoError(t, err, "a redelivery is accepted once")
	_, err = b.client.Signal(ctx, runID, "approval", "no", &flow.DeliveryOptions{DeliveryID: "d-1"})
	require.ErrorIs(t, err, flow.ErrDeliveryConflict, "a delivery ID reused with another payload is refused")
	var out string
	require.NoError(t, b.client.Result(ctx, runID, &out))
	require.Equal(t, "yes", out)

	other, err := b.client.Start(ctx, "approve", nil, nil)
	require.NoError(t, err)
	_, err = b.client.Cancel(ctx, other, "changed my mind")
	require.NoError(t, err)
	var runErr *flow.RunError
	require.ErrorAs(t, b.client.Result(ctx, other, nil), &runErr)
	require.Equal(t, flow.StatusCancelled, runErr.Status)

	_, err = b.client.Snapshot(ctx, "no-such-run")
	require.ErrorIs(t, err, flow.ErrNotFound)
	_, err = b.client.Cancel(ctx, "no-such-run", "")
	require.ErrorIs(t, err, flow.ErrNotFound)
}

// TestResultSeesEveryEnd waits on many runs that end quickly: a client that woke on a commit
// before the stream had stored it used to miss the last commit and wait forever.
func TestResultSeesEveryEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "quick", func(ctx *flow.Context, n int) (flow.Decision, error) {
			if ctx.StepOutput("one") == nil {
				return ctx.ScheduleStep("one", "echo", n), nil
			}
			return ctx.Complete(ctx.StepOutput("one")), nil
		})
		flow.RegisterStep(reg, "echo", func(_ context.Context, n int) (int, error) { return n, nil })
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	errs := make(chan error, 100)
	for i := range 100 {
		go func() {
			runID, err := b.client.Start(ctx, "quick", i, nil)
			if err == nil {
				var out int
				err = b.client.Result(ctx, runID, &out)
				if err == nil && out != i {
					err = fmt.Errorf("run %s: got %d, want %d", runID, out, i)
				}
			}
			errs <- err
		}()
	}
	for range 100 {
		require.NoError(t, <-errs)
	}
}

// Result across continue-as-new: it follows each successor, waiting for one that is not
// started yet, instead of failing with "run does not exist".
func TestResultFollowsContinuations(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "chain", func(ctx *flow.Context, n int) (flow.Decision, error) {
			if n < 3 {
				return ctx.ContinueAsNew(n + 1), nil
			}
			return ctx.Complete(n), nil
		})
	})
	// 20 chains of 4 runs take 8 s at a load average of 28; at 35 to 39 each successor took
	// 2 to 3 s to start, every await woken by its notice, and 60 s were not enough.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for i := range 20 {
		runID, err := b.client.Start(ctx, "chain", 0, &flow.StartOptions{RunID: fmt.Sprintf("chain-%d", i)})
		require.NoError(t, err)
		var out int
		require.NoError(t, b.client.Result(ctx, runID, &out), "run %s", runID)
		require.Equal(t, 3, out)
	}
}

// On a 3-server cluster with R3 streams, where any replica answers direct gets, a client that
// was just shown a run's end reads the whole history: the history service, the worker and the
// client each use another server.
func TestReadsAfterResultOnCluster(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	h, err := history.New(history.Config{Conn: c.Connect(t, 0), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	ingresstest.Start(t, ingress.Config{Conn: c.Connect(t, 1), HTTPAddr: "off", Logger: quiet})
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "pair", func(ctx *flow.Context, n int) (flow.Decision, error) {
		for _, id := range []string{"a", "b"} {
			if ctx.StepOutput(id) == nil {
				return ctx.ScheduleStep(id, "echo", n), nil
			}
		}
		return ctx.Complete(ctx.StepOutput("b")), nil
	})
	flow.RegisterStep(reg, "echo", func(_ context.Context, n int) (int, error) { return n, nil })
	w, err := worker.New(worker.Config{Conn: c.Connect(t, 1), Logger: quiet}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	client, err := flow.NewClient(t.Context(), c.Connect(t, 2), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for i := range 40 {
		runID, err := client.Start(ctx, "pair", i, nil)
		require.NoError(t, err)
		var out int
		require.NoError(t, client.Result(ctx, runID, &out))
		hist, err := client.History(ctx, runID, 0)
		require.NoError(t, err)
		require.Len(t, hist, 6, "run %s: the history read right after its result includes its end", runID)
		require.Equal(t, event.TypeRunCompleted, hist[5].Type())
		s, err := client.Snapshot(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, flow.StatusCompleted, s.Status)
	}
}

// A worker takes tasks only for the slots it has free: a task never waits, unwatched, for a slot
// while its AckWait runs out (prefetched tasks used to, and were redelivered and driven twice).
func TestTasksWaitForSlotsOnTheServer(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startHistoryAndIngress(t, srv)
	var calls atomic.Int32
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "slow", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.StepOutput("work") == nil {
			return ctx.ScheduleStep("work", "work", nil), nil
		}
		return ctx.Complete(nil), nil
	})
	flow.RegisterStep(reg, "work", func(ctx context.Context, _ any) (bool, error) {
		calls.Add(1)
		select { // longer than AckWait: the run's own task is kept alive by heartbeats
		case <-time.After(1500 * time.Millisecond):
		case <-ctx.Done():
		}
		return true, nil
	})
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet, RunConcurrency: 1, AckWait: time.Second}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	client, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var ids []string
	for i := range 3 {
		id, err := client.Start(ctx, "slow", nil, &flow.StartOptions{RunID: fmt.Sprintf("slow-%d", i)})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	for _, id := range ids {
		require.NoError(t, client.Result(ctx, id, nil))
	}
	require.Equal(t, int32(3), calls.Load(), "each step ran once")
	cons, err := natstest.JetStream(t, srv).Consumer(ctx, streams.Tasks, "worker-"+streams.DefaultQueue)
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.NumRedelivered, "no task was redelivered while it waited")
}
