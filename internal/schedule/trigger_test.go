package schedule

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
)

// TestTwoTriggersInOneMillisecond: two triggers asked for in the same millisecond are two
// actions with two run IDs; under allow_all both start, and the counts say two.
func TestTwoTriggersInOneMillisecond(t *testing.T) {
	w := newWorld(t, minutely(AllowAll), "2026-06-01T10:00:30Z")
	for _, id := range []string{"a", "b"} {
		ok, err := w.s.Trigger(id, "", w.now)
		require.NoError(t, err)
		require.True(t, ok)
	}
	w.round() // world.exec fails the test if a start names a run that exists
	require.Len(t, w.started, 2)
	require.NotEqual(t, w.started[0], w.started[1])
	require.Equal(t, int64(2), w.s.State.Started)
	for _, id := range w.started {
		require.Equal(t, w.now, w.refs[id].Slot, "a trigger's slot is the time it was asked for")
	}
}

// TestTriggerRunID: a trigger's run ID is its slot to the millisecond and a hash of its request
// ID: a valid run ID for the longest schedule name; a trigger without a request ID is refused.
func TestTriggerRunID(t *testing.T) {
	at := utc("2026-03-29T01:00:00Z").Add(123 * time.Millisecond)
	require.NotEqual(t, RunID("r", event.ScheduleTrigger, at, "a"), RunID("r", event.ScheduleTrigger, at, "b"))
	require.Equal(t, RunID("r", event.ScheduleTrigger, at, "a"), RunID("r", event.ScheduleTrigger, at, "a"))
	require.NoError(t, event.ValidateRunID(RunID(strings.Repeat("n", MaxNameLength), event.ScheduleTrigger, at, strings.Repeat("x", 200))))
	w := newWorld(t, minutely(AllowAll), "2026-06-01T10:00:30Z")
	_, err := w.s.Trigger("", "", w.now)
	require.ErrorIs(t, err, ErrInvalid)
}
