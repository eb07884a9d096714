package examples_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

func TestParent(t *testing.T) {
	t.Parallel()

	t.Run("CompletesWithTheChildrensOutputs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, examples.Options{})
		runID := b.start(t, "parent", map[string]string{"sleep": "10s"}, "trip")
		require.Equal(t, []string{"trip", "trip=abandon", "trip=request_cancel"}, b.env.Runs())
		for _, c := range []struct {
			runID  string
			policy event.CancelPolicy
		}{{"trip=request_cancel", flow.CancelPolicyRequest}, {"trip=abandon", flow.CancelPolicyAbandon}} {
			require.Equal(t, flow.StatusSuspended, b.snapshot(t, c.runID).Status)
			require.Equal(t, c.policy, b.snapshot(t, runID).Children[string(c.policy)].CancelPolicy)
		}
		require.NoError(t, b.env.Advance(b.ctx, 10*time.Second))
		require.JSONEq(t, `{
			"request_cancel": {"sleep": "10s", "policy": "request_cancel"},
			"abandon": {"sleep": "10s", "policy": "abandon"}
		}`, b.output(t, runID))
	})

	t.Run("CancelReachesEachChildByPolicy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, examples.Options{})
		runID := b.start(t, "parent", nil, "trip")
		require.NoError(t, b.env.Advance(b.ctx, 10*time.Second))
		require.NoError(t, b.env.Cancel(b.ctx, runID, "trip called off"))

		s := b.snapshot(t, runID)
		require.Equal(t, flow.StatusCancelled, s.Status)
		require.Equal(t, event.CauseCancelRequested, s.Outcome.Cause)

		linked := b.snapshot(t, "trip=request_cancel")
		require.Equal(t, flow.StatusCancelled, linked.Status, "request_cancel: the child is asked to cancel and ends at once")
		require.Equal(t, `cancellation requested: parent run "trip" ended (cancelled)`, linked.Outcome.Reason)

		require.Equal(t, flow.StatusSuspended, b.snapshot(t, "trip=abandon").Status, "abandon: the child sleeps on")
		timers := b.env.PendingTimers()
		require.Len(t, timers, 1, "only the abandoned child's timer is left")
		require.Equal(t, "trip=abandon", timers[0].RunID)
		require.Equal(t, flowtest.DefaultStart.Add(30*time.Second), timers[0].Due, "the default sleep is 30s")

		require.NoError(t, b.env.Advance(b.ctx, 20*time.Second))
		require.JSONEq(t, `{"sleep": "30s", "policy": "abandon"}`, b.output(t, "trip=abandon"))
		require.Equal(t, flow.StatusCancelled, b.snapshot(t, runID).Status, "the parent stays cancelled")
	})

	t.Run("ChildFailureFailsTheParent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, examples.Options{})
		runID := b.start(t, "parent", nil, "trip")
		require.NoError(t, b.env.Cancel(b.ctx, "trip=abandon", "not this one"))
		s := b.snapshot(t, runID)
		require.Equal(t, flow.StatusFailed, s.Status)
		require.Equal(t, "cancelled", s.Outcome.Error.Kind)
		require.Equal(t, flow.StatusCancelled, b.snapshot(t, "trip=request_cancel").Status, "the parent's end reaches the other child")
	})

	t.Run("BadSleep", func(t *testing.T) {
		t.Parallel()
		b := setup(t, examples.Options{})
		runID := b.start(t, "parent", map[string]string{"sleep": "a while"}, "trip")
		b.requireInvalidInput(t, runID, `sleep must be a positive duration such as "30s", got "a while"`)
		require.Equal(t, []string{"trip"}, b.env.Runs(), "no child started")
	})
}

func TestChild(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input any
		sleep time.Duration
		want  string
	}{
		{"DefaultSleepAndNullInput", nil, 30 * time.Second, `null`},
		{"CompletesWithItsInput", map[string]string{"sleep": "2s", "policy": "abandon"}, 2 * time.Second, `{"sleep": "2s", "policy": "abandon"}`},
		{"EmptySleepTakesTheDefault", map[string]string{"sleep": ""}, 30 * time.Second, `{"sleep": ""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, examples.Options{})
			runID := b.start(t, "child", tt.input, "nap")
			require.NoError(t, b.env.Advance(b.ctx, tt.sleep-time.Millisecond))
			require.Equal(t, flow.StatusSuspended, b.snapshot(t, runID).Status)
			require.NoError(t, b.env.Advance(b.ctx, time.Millisecond))
			require.JSONEq(t, tt.want, b.output(t, runID))
		})
	}

	t.Run("BadSleep", func(t *testing.T) {
		t.Parallel()
		b := setup(t, examples.Options{})
		runID := b.start(t, "child", map[string]string{"sleep": "0s"}, "nap")
		b.requireInvalidInput(t, runID, `sleep must be a positive duration such as "30s", got "0s"`)
	})
}
