package timerindex_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/timerindex"
)

// The index keys each timer by its run, registers it again idempotently, lists the keys by run,
// and deletes one timer, or every timer of a run; deleting what is gone is no error.
func TestIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := natstest.RunJetStream(t)
	x, err := timerindex.Open(ctx, natstest.JetStream(t, srv))
	require.NoError(t, err)
	due := time.Now().UTC().Truncate(time.Millisecond)
	nap := core.Timer{RunID: "r1", Kind: core.TimerWait, ID: "nap", Due: due, Seq: 2}
	retry := core.Timer{RunID: "r1", Kind: core.TimerRetry, ID: "s", Attempt: 1, Due: due, Seq: 3}
	other := core.Timer{RunID: "r2", Kind: core.TimerWait, ID: "nap", Due: due, Seq: 2}
	for _, tm := range []core.Timer{nap, retry, other, nap} {
		require.NoError(t, x.Put(ctx, tm))
	}
	byRun, err := x.ByRun(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{timerindex.Key(nap), timerindex.Key(retry)}, byRun["r1"])
	require.Equal(t, []string{timerindex.Key(other)}, byRun["r2"])

	w, err := x.Watch(ctx)
	require.NoError(t, err)
	got := map[string]core.Timer{}
	for e := range w.Updates() {
		if e == nil {
			break
		}
		require.NoError(t, e.Err)
		got[e.Key] = e.Value
	}
	require.NoError(t, w.Stop())
	require.Len(t, got, 3)
	require.True(t, got[timerindex.Key(retry)].Due.Equal(due))
	require.Equal(t, retry.Attempt, got[timerindex.Key(retry)].Attempt)

	require.NoError(t, x.DeleteTimer(ctx, nap))
	require.NoError(t, x.DeleteTimer(ctx, nap), "a timer without an entry")
	require.NoError(t, x.DeleteRun(ctx, "r2"))
	require.NoError(t, x.Delete(ctx, timerindex.Key(other)), "an entry that is gone")
	byRun, err = x.ByRun(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"r1": {timerindex.Key(retry)}}, byRun)

	_, err = timerindex.Decode([]byte(`{"kind":"wait"}`))
	require.Error(t, err, "a timer without a run is malformed")
}
