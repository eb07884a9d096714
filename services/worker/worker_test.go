package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

type testBundle struct {
	srv    *natsserver.Server
	client *flow.Client
}

var quiet = natstest.Logger()

func setup(t *testing.T, register func(*flow.Registry)) *testBundle {
	t.Helper()
	srv := natstest.RunJetStream(t)
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	reg := flow.NewRegistry(nil)
	register(reg)
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, s.Stop()) })
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
		require.ErrorIs(t, err, flow.ErrNotFound)
		require.ErrorContains(t, err, `workflow definition "ordr" is not registered on queue "default" (known: fanout, order, reminder)`)
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
	_, err = b.client.Signal(ctx, runID, "approval", "yes", &flow.SignalOptions{DeliveryID: "d-1"})
	require.NoError(t, err)
	_, err = b.client.Signal(ctx, runID, "approval", "no", &flow.SignalOptions{DeliveryID: "d-1"})
	require.NoError(t, err, "a redelivery is accepted once")
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
