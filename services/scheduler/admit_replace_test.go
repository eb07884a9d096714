package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/pkg/event"
)

// A reset's new run that queues while its old run still holds the key's slot (the reset ends
// it, and the controller has not seen the end yet) waits for that slot: cancel_newest does not
// cancel it, as it would any other run arriving at a full key. Found by the torture test,
// where a reset run under cancel_newest was cancelled or run depending on which of the two
// the controller saw first.
func TestResetRunWaitsForItsOldRunsSlot(t *testing.T) {
	control := &event.FlowControl{Group: "g", Key: "k", KeyConcurrency: 1, OnLimit: event.OnLimitCancelNewest}
	now := time.Now().UTC()
	for _, c := range []struct {
		holder, queued string
		cancelled      bool
	}{
		{holder: "r1", queued: "r1=_reset-0a1b2c3d4e5f6a7b"},
		{holder: "r1=_reset-0a1b2c3d4e5f6a7b", queued: "r1=_reset-1122334455667788"},
		{holder: "r2", queued: "r1=_reset-0a1b2c3d4e5f6a7b", cancelled: true},
		{holder: "r1", queued: "r3", cancelled: true},
	} {
		a := &admitter{c: &admissionController{batch: 10}, groups: map[string]*admitGroup{}, byRun: map[string]*queued{},
			byKey: map[string]string{}, holding: map[string]string{}, awaiting: map[string]string{}}
		g := a.group("g")
		q := &queued{w: limits.Waiting{RunID: c.queued, Control: control, StartedAt: now.Add(-time.Second)}}
		a.byRun[c.queued] = q
		g.add(q)
		st := &limits.State{Group: "g", Holders: map[string]limits.Holder{c.holder: {Key: "k", At: now.Add(-time.Minute)}}}
		picks, cancels, _ := a.choose(g, st, now)
		require.Empty(t, picks, "%+v", c)
		if c.cancelled {
			require.Len(t, cancels, 1, "%+v", c)
		} else {
			require.Empty(t, cancels, "%+v: the reset's new run waits", c)
		}
	}
}
