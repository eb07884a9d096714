package core_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
)

// The pending inputs are a projection of the history: buffered signals and undecided updates.
func TestPendingInputs(t *testing.T) {
	sig := func(name, payload, id string) *event.SignalReceived {
		return &event.SignalReceived{Name: name, Payload: json.RawMessage(payload), DeliveryID: id}
	}
	h := newHistory(t, "p", event.Spec{})
	n, b := h.snapshot().PendingInputs()
	require.Zero(t, n)
	require.Zero(t, b)

	h.add(&event.SignalAwaited{WaitID: "w1", Name: "a"})
	require.True(t, h.snapshot().SignalAwaited("a"))
	require.False(t, h.snapshot().SignalAwaited("b"))
	h.add(sig("a", `"consumed"`, "d1"), sig("b", `"xx"`, "d2"), sig("a", `12345`, "d3"))
	s := h.snapshot()
	require.False(t, s.SignalAwaited("a"), "the wait took its signal")
	n, b = s.PendingInputs()
	require.Equal(t, 2, n, "the second a and the b are buffered")
	require.Equal(t, int64(len(`"xx"`)+len(`12345`)), b)

	h.add(&event.SignalAwaited{WaitID: "w2", Name: "b"}) // takes the buffered b
	h.add(&event.UpdateReceived{UpdateID: "u1", Name: "set", Payload: json.RawMessage(`[1,2]`)})
	n, b = h.snapshot().PendingInputs()
	require.Equal(t, 2, n, "the a and the update")
	require.Equal(t, int64(len(`12345`)+len(`[1,2]`)), b)

	h.add(&event.UpdateRejected{UpdateID: "u1", Error: event.ErrorInfo{Message: "no"}})
	n, b = h.snapshot().PendingInputs()
	require.Equal(t, 1, n, "a decided update is not pending")
	require.Equal(t, int64(len(`12345`)), b)
}
