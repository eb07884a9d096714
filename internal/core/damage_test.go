package core_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// run.damage_accepted, an operator's release of a damaged history, may follow any event, the
// terminal one included, and more than once, and changes nothing of the run but its sequence;
// only it cannot open a history.
func TestDamageAcceptedFollowsAnything(t *testing.T) {
	t.Parallel()
	accepted := func() *event.RunDamageAccepted {
		return &event.RunDamageAccepted{Reason: "a foreign write", By: "terminate", After: 3, Through: 4}
	}
	rules := func(h *history) []string {
		var out []string
		for _, v := range core.Check(h.run, h.envs) {
			out = append(out, v.Rule)
		}
		return out
	}
	h := newHistory(t, "a", event.Spec{}).add(&event.SignalAwaited{WaitID: "go", Name: "go"})
	before := h.snapshot()
	h.add(accepted())
	after := h.snapshot()
	require.Equal(t, before.Status, after.Status)
	require.Equal(t, before.Seq+1, after.Seq)
	h.add(&event.SignalReceived{Name: "go", Payload: json.RawMessage(`1`), DeliveryID: "d"},
		&event.RunCompleted{Output: json.RawMessage(`1`)}, accepted(), accepted())
	require.Empty(t, rules(h))
	ended := h.snapshot()
	require.Equal(t, core.StatusCompleted, ended.Status)
	require.Equal(t, uint64(5), ended.Outcome.Seq)

	h = newHistory(t, "b", event.Spec{}).add(accepted(), &event.RunFailed{Error: event.ErrorInfo{Message: "ended"}, Cause: event.CauseOperator})
	require.Empty(t, rules(h), "a termination follows it in the same commit")

	require.Equal(t, []string{"first_event"}, rules(&history{t: t, run: "c", envs: []event.Envelope{{RunID: "c", Seq: 1, Time: epoch, Payload: accepted()}}}))
}
