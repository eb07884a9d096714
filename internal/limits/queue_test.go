package limits_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
)

// The admission queue keys each waiting run by its ID; a delete at a stale revision leaves the
// entry, and deleting what is gone is no error.
func TestQueue(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := natstest.RunJetStream(t)
	q, err := limits.OpenQueue(ctx, natstest.JetStream(t, srv))
	require.NoError(t, err)
	w := limits.Waiting{RunID: "r1", Definition: "d", Priority: 2, StartedAt: time.Now().UTC().Truncate(time.Millisecond),
		Control: &event.FlowControl{Group: "g", Concurrency: 1}}
	require.NoError(t, q.Put(ctx, w))
	got, rev, found, err := q.Get(ctx, "r1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, w.RunID, got.RunID)
	require.Equal(t, w.Priority, got.Priority)
	require.True(t, w.StartedAt.Equal(got.StartedAt))
	runs, err := q.Runs(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"r1"}, runs)

	require.NoError(t, q.Put(ctx, w))
	require.Error(t, q.Delete(ctx, "r1", rev), "written since")
	_, rev, _, err = q.Get(ctx, "r1")
	require.NoError(t, err)
	require.NoError(t, q.Delete(ctx, "r1", rev))
	require.NoError(t, q.Delete(ctx, "r1", 0), "gone")
	_, _, found, err = q.Get(ctx, "r1")
	require.NoError(t, err)
	require.False(t, found)

	_, err = limits.DecodeWaiting([]byte(`{"run_id":"r2"}`))
	require.Error(t, err, "an entry without a control is malformed")
}
