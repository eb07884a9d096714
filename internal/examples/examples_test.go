package examples_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

type testBundle struct {
	env *flowtest.Env
	ctx context.Context
}

// setup returns an Env running the examples registered with o.
func setup(t *testing.T, o examples.Options) *testBundle {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: slog.New(slog.DiscardHandler)})
	examples.RegisterWith(reg, o)
	env, err := flowtest.New(reg, nil)
	require.NoError(t, err)
	return &testBundle{env: env, ctx: t.Context()}
}

func (b *testBundle) start(t *testing.T, definition string, input any, runID string) string {
	t.Helper()
	id, err := b.env.Start(b.ctx, definition, input, &flowtest.StartOptions{RunID: runID})
	require.NoError(t, err)
	return id
}

// snapshot returns the projection of runID, after checking its history's invariants.
func (b *testBundle) snapshot(t *testing.T, runID string) *flow.Snapshot {
	t.Helper()
	hist, err := b.env.History(b.ctx, runID)
	require.NoError(t, err)
	require.Empty(t, core.Check(runID, hist), "history invariants of %s", runID)
	s, err := b.env.Snapshot(b.ctx, runID)
	require.NoError(t, err)
	return s
}

// output returns the output of runID, which must have completed.
func (b *testBundle) output(t *testing.T, runID string) string {
	t.Helper()
	s := b.snapshot(t, runID)
	require.Equal(t, flow.StatusCompleted, s.Status, "run %s: %+v", runID, s.Outcome)
	return string(s.Outcome.Output)
}

// requireInvalidInput checks that runID failed with kind invalid_input and message.
func (b *testBundle) requireInvalidInput(t *testing.T, runID, message string) {
	t.Helper()
	s := b.snapshot(t, runID)
	require.Equal(t, flow.StatusFailed, s.Status)
	require.Equal(t, flow.KindInvalidInput, s.Outcome.Error.Kind)
	require.Equal(t, message, s.Outcome.Error.Message)
}

func TestRegister(t *testing.T) {
	t.Parallel()
	reg := flow.NewRegistry(nil)
	examples.Register(reg)
	require.Equal(t, []string{"approval", "child", "fanout", "invoice", "order", "parent", "reminder", "webhook"}, sdk.RuntimeOf(reg).Workflows())
	require.Equal(t, []string{"announceHook", "chargePayment", "computeTax", "processItem", "reserveStock", "sendReminder", "shipOrder"}, sdk.RuntimeOf(reg).Steps())
}
