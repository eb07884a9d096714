package examples_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

func TestApproval(t *testing.T) {
	t.Parallel()

	t.Run("SignalApproves", func(t *testing.T) {
		t.Parallel()
		b := setup(t, examples.Options{})
		runID := b.start(t, "approval", map[string]string{"who": "bob", "timeout": "30s"}, "expense-1")
		s := b.snapshot(t, runID)
		require.Equal(t, flow.StatusSuspended, s.Status)
		require.Equal(t, flowtest.DefaultStart.Add(30*time.Second), s.Waits["deadline"].Deadline, "the deadline counts from the start")
		require.Contains(t, s.SignalWaits, "approval", "the run waits on the signal and the deadline at once")

		require.NoError(t, b.env.Advance(b.ctx, 29*time.Second))
		require.NoError(t, b.env.Signal(b.ctx, runID, examples.ApprovalSignal, map[string]string{"note": "ok"}))
		require.JSONEq(t, `{"approved": true, "by": "bob", "payload": {"note": "ok"}}`, b.output(t, runID))
		require.Empty(t, b.env.PendingTimers(), "the moot deadline is dropped")
	})

	t.Run("DeadlinePassesFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, examples.Options{})
		runID := b.start(t, "approval", nil, "expense-2")
		require.NoError(t, b.env.Advance(b.ctx, time.Minute-time.Second))
		require.Equal(t, flow.StatusSuspended, b.snapshot(t, runID).Status, "the default timeout is 1m")

		require.NoError(t, b.env.Advance(b.ctx, time.Second))
		require.JSONEq(t, `{"approved": false, "timed_out": true}`, b.output(t, runID))
		err := b.env.Signal(b.ctx, runID, examples.ApprovalSignal, nil)
		require.ErrorIs(t, err, flow.ErrTerminal, "a late approval is refused")
	})

	t.Run("DefaultsAndNullPayload", func(t *testing.T) {
		t.Parallel()
		b := setup(t, examples.Options{})
		runID := b.start(t, "approval", map[string]string{}, "expense-3")
		require.NoError(t, b.env.Signal(b.ctx, runID, examples.ApprovalSignal, nil))
		require.JSONEq(t, `{"approved": true, "by": "ann", "payload": null}`, b.output(t, runID))
	})

	t.Run("OtherSignalsDoNotApprove", func(t *testing.T) {
		t.Parallel()
		b := setup(t, examples.Options{})
		runID := b.start(t, "approval", map[string]string{"timeout": "10s"}, "expense-4")
		require.NoError(t, b.env.Signal(b.ctx, runID, "reject", nil))
		require.Equal(t, flow.StatusSuspended, b.snapshot(t, runID).Status)
		require.NoError(t, b.env.Advance(b.ctx, 10*time.Second))
		require.JSONEq(t, `{"approved": false, "timed_out": true}`, b.output(t, runID))
	})

	t.Run("BadTimeout", func(t *testing.T) {
		t.Parallel()
		for _, timeout := range []string{"soon", "30", "0s", "-1m"} {
			b := setup(t, examples.Options{})
			runID := b.start(t, "approval", map[string]string{"timeout": timeout}, "expense-bad")
			b.requireInvalidInput(t, runID, `timeout must be a positive duration such as "1m", got "`+timeout+`"`)
			require.Empty(t, b.env.PendingTimers(), "timeout %q: nothing waits", timeout)
		}
	})
}
