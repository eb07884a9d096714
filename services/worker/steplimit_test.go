package worker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/worker"
)

// TestStepLimits runs runs whose batches of "charge" steps are limited to 2 in flight and 6
// started per 500 ms, across two workers: the attempts never exceed either limit, and every run
// completes.
func TestStepLimits(t *testing.T) {
	t.Parallel()
	const runs, perRun, conc, rate, period = 6, 3, 2, 6, 500 * time.Millisecond
	srv := natstest.RunJetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: natstest.Logger()})
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { _ = h.Stop() })
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), Logger: natstest.Logger()})

	var mu sync.Mutex
	var running, peak int
	var starts []time.Time
	registry := func() *flow.Registry {
		reg := flow.NewRegistry(&flow.RegistryOptions{Logger: natstest.Logger()})
		flow.RegisterWorkflow(reg, "charges", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			var batch []flow.Step
			total, done := 0, true
			for i := range perRun {
				id := fmt.Sprintf("c%d", i)
				batch = append(batch, flow.Step{ID: id, Name: "charge", Input: i})
				out, ok, err := flow.Output[int](ctx, id)
				if err != nil {
					return nil, err
				}
				done = done && ok
				total += out
			}
			if !done {
				return ctx.ScheduleSteps(batch...), nil // the same batch: waiting on its members
			}
			return ctx.Complete(total), nil
		})
		flow.RegisterStep(reg, "charge", func(ctx context.Context, n int) (int, error) {
			mu.Lock()
			running++
			peak = max(peak, running)
			starts = append(starts, time.Now())
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			return n, nil
		})
		flow.LimitStep(reg, "charge", flow.StepLimit{Concurrency: conc, Rate: rate, Period: period})
		return reg
	}
	for range 2 {
		w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: natstest.Logger()}, registry())
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
	}
	client, err := flow.NewClient(ctx, natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	var ids []string
	for i := range runs {
		id, err := client.Start(ctx, "charges", nil, &flow.StartOptions{RunID: fmt.Sprintf("ch-%d", i)})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	// While attempts wait, the step's entry lists them, with the reason.
	lims, err := limits.OpenSteps(ctx, natstest.JetStream(t, srv))
	require.NoError(t, err)
	var sawWaiting, sawDescribed atomic.Bool
	go func() {
		for ctx.Err() == nil && !(sawWaiting.Load() && sawDescribed.Load()) {
			if st, err := lims.LoadStep(ctx, "charge"); err == nil && len(st.Waiting) > 0 {
				sawWaiting.Store(true)
			}
			// `flow status` shows them too (the history service reads them for the snapshot).
			for _, id := range ids {
				if d, err := client.Describe(ctx, id, 0); err == nil && len(d.StepWaits) > 0 && d.StepWaits[0].Why != "" {
					sawDescribed.Store(true)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for i, id := range ids {
		var out int
		require.NoError(t, client.Result(ctx, id, &out), "run %d", i)
		require.Equal(t, 0+1+2, out)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, starts, runs*perRun)
	require.LessOrEqual(t, peak, conc, "attempts in flight at once")
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 0; i+rate < len(starts); i++ {
		require.Greater(t, starts[i+rate].Sub(starts[i]), period-50*time.Millisecond, "attempts %d..%d started within one period (50 ms allowed between a slot and the attempt's start)", i, i+rate)
	}
	require.True(t, sawWaiting.Load(), "waiting attempts are listed")
	require.True(t, sawDescribed.Load(), "a run's waiting attempts are described with why")
}
