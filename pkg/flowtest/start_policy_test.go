package flowtest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

// Delays and debounce quiet periods pass on the virtual clock with Advance.
func TestStartPoliciesOnTheVirtualClock(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "echo", func(ctx *flow.Context, in int) (flow.Decision, error) { return ctx.Complete(in), nil })
	})
	id, err := b.env.Start(b.ctx, "echo", 1, &flowtest.StartOptions{RunID: "later", Delay: time.Hour})
	require.NoError(t, err)
	require.Equal(t, flow.StatusSuspended, b.snapshot(t, id).Status)
	require.NoError(t, b.env.Advance(b.ctx, 59*time.Minute))
	require.True(t, b.snapshot(t, id).Delayed)
	require.NoError(t, b.env.Advance(b.ctx, time.Minute))
	require.Equal(t, flow.StatusCompleted, b.snapshot(t, id).Status)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeRunDelayFired, event.TypeRunCompleted}, b.types(t, id))

	for i := range 4 {
		got, err := b.env.Start(b.ctx, "echo", i, &flowtest.StartOptions{Debounce: &flow.Debounce{Key: "k", Period: time.Minute}})
		require.NoError(t, err)
		if i == 0 {
			id = got
		}
		require.Equal(t, id, got)
		require.NoError(t, b.env.Advance(b.ctx, 30*time.Second))
	}
	require.True(t, b.snapshot(t, id).Delayed, "each start restarts the quiet period")
	require.NoError(t, b.env.Advance(b.ctx, 30*time.Second))
	var out int
	require.NoError(t, b.env.Result(b.ctx, id, &out))
	require.Equal(t, 3, out, "the latest input")
	require.Empty(t, b.env.PendingTimers(), "the moot start timers are gone")
}
