package ingress_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/ingress"
)

// A start's run timeouts reach run.started with their deadlines, over HTTP and from the Go
// client's CloudEvents; a bad duration is refused and appends nothing.
func TestStartTimeouts(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{})
	ctx := t.Context()
	status, _, _ := b.post(t, "gate", `{"run_id":"to-1","input":1,"execution_timeout":"1h","run_timeout":"10m"}`)
	require.Equal(t, http.StatusCreated, status)
	_, err := b.client.Start(ctx, "gate", 2, &flow.StartOptions{RunID: "to-2", RunTimeout: time.Minute})
	require.NoError(t, err)
	for id, want := range map[string][2]time.Duration{"to-1": {time.Hour, 10 * time.Minute}, "to-2": {0, time.Minute}} {
		hist, err := b.client.History(ctx, id, 0)
		require.NoError(t, err)
		st := hist[0].Payload.(*event.RunStarted)
		require.NotNil(t, st.Timeouts, id)
		require.Equal(t, event.Duration(want[0]), st.Timeouts.Execution, id)
		require.Equal(t, event.Duration(want[1]), st.Timeouts.Run, id)
		require.WithinDuration(t, hist[0].Time.Add(want[1]), st.Timeouts.RunDeadline, time.Second, id)
	}
	status, _, e := b.post(t, "gate", `{"run_id":"to-3","run_timeout":"soon"}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, e.Message, "soon")
	_, err = b.client.Snapshot(ctx, "to-3")
	require.ErrorIs(t, err, flow.ErrNotFound)
}
