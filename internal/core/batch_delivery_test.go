package core_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// TestCancelAndTerminateUnderADeliveryID: a cancellation or termination that names a delivery
// ID (a batch job's) records it, and its repeat is a duplicate even after the run ended, while
// another request finds the run cancelling or ended.
func TestCancelAndTerminateUnderADeliveryID(t *testing.T) {
	t.Parallel()
	h := newHistory(t, "r1", event.Spec{})
	ev, err := core.RequestCancelDelivery(h.snapshot(), "bulk", "batch:j1:r1")
	require.NoError(t, err)
	require.Equal(t, &event.RunCancelRequested{Reason: "bulk", DeliveryID: "batch:j1:r1"}, ev[0])
	s := h.add(ev...).snapshot()
	require.True(t, s.DeliverySeen("batch:j1:r1"))

	_, err = core.RequestCancelDelivery(s, "bulk", "batch:j1:r1")
	require.ErrorIs(t, err, core.ErrDuplicate, "the same delivery again")
	_, err = core.RequestCancelDelivery(s, "bulk", "batch:j2:r1")
	require.ErrorIs(t, err, core.ErrCancelRequested, "another job's")
	require.NotErrorIs(t, err, core.ErrDuplicate)
	_, err = core.RequestCancel(s, "plain")
	require.ErrorIs(t, err, core.ErrDuplicate, "a request without a delivery ID keeps its meaning")

	s = h.add(&event.RunCancelled{Reason: "bulk", Cause: event.CauseCancelRequested}).snapshot()
	_, err = core.RequestCancelDelivery(s, "bulk", "batch:j1:r1")
	require.ErrorIs(t, err, core.ErrDuplicate, "a repeat after the run ended")
	_, err = core.RequestCancelDelivery(s, "bulk", "batch:j3:r1")
	require.ErrorIs(t, err, core.ErrTerminal)

	h2 := newHistory(t, "r2", event.Spec{})
	ev, err = core.TerminateDelivery(h2.snapshot(), "", "batch:j4:r2")
	require.NoError(t, err)
	require.Equal(t, "batch:j4:r2", ev[len(ev)-1].(*event.RunFailed).DeliveryID)
	s = h2.add(ev...).snapshot()
	require.Equal(t, core.StatusFailed, s.Status)
	_, err = core.TerminateDelivery(s, "", "batch:j4:r2")
	require.ErrorIs(t, err, core.ErrDuplicate)
	_, err = core.TerminateDelivery(s, "", "batch:j5:r2")
	require.ErrorIs(t, err, core.ErrTerminal)
	_, err = core.Terminate(s, "")
	require.ErrorIs(t, err, core.ErrTerminal)

	// The recorded delivery survives a clone (the engine's cache copies snapshots).
	require.True(t, s.Clone().DeliverySeen("batch:j4:r2"))
}
