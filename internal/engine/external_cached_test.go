package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/store/memstore"
	"github.com/flowrun/flow/pkg/flow"
)

// An input is decided on the engine's cached snapshot of the run without reading the run first;
// a refusal on that snapshot is decided again on the run as read: here a signal that the cached
// snapshot refuses for the pending input the run has consumed since.
func TestInputRefusedOnACachedSnapshotIsDecidedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			for _, name := range []string{"a", "x", "never"} {
				if ctx.Signal(name) == nil {
					return ctx.AwaitSignal(name, name), nil
				}
			}
			return ctx.Complete(nil), nil
		})
	})
	mem := memstore.New()
	ingress := b.engineWith(t, engine.Config{Store: mem, Pending: engine.PendingLimits{Count: 1}})
	worker := b.engineOn(t, mem, nil)
	runID := b.start(t, worker, "wf")
	drive := func() {
		t.Helper()
		res, err := worker.Drive(t.Context(), runID, 0)
		require.NoError(t, err)
		require.Equal(t, core.StatusSuspended, res.Status)
	}
	drive() // awaits a
	_, err := ingress.Signal(t.Context(), runID, "x", []byte(`1`), "d-x")
	require.NoError(t, err, "x is the run's one pending input")
	_, err = ingress.Signal(t.Context(), runID, "a", []byte(`1`), "d-a")
	require.NoError(t, err, "a is awaited: consumed, not pending")
	drive() // takes a, then x; awaits never

	// The ingress's cached snapshot still holds x pending: the limit refuses y there, and the
	// run as read takes it.
	_, err = ingress.Signal(t.Context(), runID, "y", []byte(`1`), "d-y")
	require.NoError(t, err)
	s, err := worker.Snapshot(t.Context(), runID)
	require.NoError(t, err)
	require.Len(t, s.Signals, 3)
	require.Equal(t, "y", s.Signals[2].Name)
}
