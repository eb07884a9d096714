package flowtest_test

import (
	"context"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

var rewrite = flag.Bool("rewrite", false, "record testdata histories again")

// orderWorkflow is version 1 of an order workflow; testdata/order_v1.jsonl holds one of its runs.
func orderWorkflow(reg *flow.Registry, reserveName string) {
	flow.RegisterWorkflow(reg, "order", func(ctx *flow.Context, order string) (flow.Decision, error) {
		if ctx.StepOutput("reserve") == nil {
			return ctx.ScheduleStep("reserve", reserveName, order), nil
		}
		if !ctx.Fired("settle") {
			return ctx.Sleep("settle", time.Hour), nil
		}
		if ctx.StepOutput("charge") == nil {
			return ctx.ScheduleStep("charge", "charge", order, flow.WithRetry(flow.RetryPolicy{MaxAttempts: 5})), nil
		}
		return ctx.Complete("shipped"), nil
	})
	flow.RegisterStep(reg, reserveName, func(context.Context, string) (bool, error) { return true, nil })
	flow.RegisterStep(reg, "charge", func(context.Context, string) (string, error) { return "ch_1", nil })
}

func TestReplay(t *testing.T) {
	t.Parallel()
	path := filepath.Join("testdata", "order_v1.jsonl")
	if *rewrite {
		reg := flow.NewRegistry(nil)
		orderWorkflow(reg, "reserve")
		env, err := flowtest.New(reg, nil)
		require.NoError(t, err)
		runID, err := env.Start(t.Context(), "order", "order-1", &flowtest.StartOptions{RunID: "order-1"})
		require.NoError(t, err)
		require.NoError(t, env.Advance(t.Context(), time.Hour))
		hist, err := env.History(t.Context(), runID)
		require.NoError(t, err)
		require.NoError(t, flowtest.WriteHistory(path, hist))
	}

	t.Run("CompatibleCodeReplays", func(t *testing.T) {
		t.Parallel()
		reg := flow.NewRegistry(&flow.RegistryOptions{BuildID: "v2"})
		orderWorkflow(reg, "reserve")
		flowtest.Replay(t, path, reg)
	})

	t.Run("IncompatibleCodeIsCaught", func(t *testing.T) {
		t.Parallel()
		reg := flow.NewRegistry(nil)
		orderWorkflow(reg, "reserveV2")
		err := flowtest.ReplayFile(path, reg)
		require.ErrorIs(t, err, flow.ErrNonDeterminism)
		require.ErrorContains(t, err, `step "reserve" field name was "reserve" at seq 2, but the workflow code now gives "reserveV2"`)
	})
}
