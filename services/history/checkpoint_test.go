package history_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/flow"
)

// signalTicks starts run runID of "ticks", sends it n tick signals, and waits until the history
// service checkpointed it at seq atLeast or later. It returns the checkpoint (without its
// snapshot).
func (b *ownerBundle) signalTicks(t *testing.T, runID string, n int, atLeast uint64) *engine.Checkpoint {
	t.Helper()
	_, err := b.client.Start(b.ctx, "ticks", nil, &flow.StartOptions{RunID: runID})
	require.NoError(t, err)
	for i := range n {
		_, err := b.client.Signal(b.ctx, runID, "tick", i, nil)
		require.NoError(t, err)
	}
	var cp *engine.Checkpoint
	require.Eventually(t, func() bool {
		cp, err = b.cps.Info(b.ctx, runID)
		require.NoError(t, err)
		return cp != nil && cp.Seq >= atLeast
	}, 30*time.Second, 10*time.Millisecond, "the history service checkpoints run %s at seq %d or later", runID, atLeast)
	return cp
}

// coldLoad reads run runID's snapshot in a fresh engine and store that read checkpoints, and
// returns it with the number of history messages the load read.
func (b *ownerBundle) coldLoad(t *testing.T, runID string) (*core.Snapshot, uint64) {
	t.Helper()
	js := natstest.JetStream(t, b.srv)
	st, err := jsstore.New(b.ctx, js, &jsstore.Options{Source: "flow/test"})
	require.NoError(t, err)
	host, err := jshost.New(b.ctx, js, "flow/test", quiet)
	require.NoError(t, err)
	e, err := engine.New(engine.Config{Store: st, Host: host, Logger: quiet, Checkpoints: b.cps})
	require.NoError(t, err)
	s, err := e.ReadSnapshot(b.ctx, runID)
	require.NoError(t, err)
	return s, st.MessagesRead()
}

// projection returns the projection of run runID's whole history, and its last sequence.
func (b *ownerBundle) projection(t *testing.T, runID string) *core.Snapshot {
	t.Helper()
	st, err := jsstore.New(b.ctx, natstest.JetStream(t, b.srv), &jsstore.Options{Source: "flow/test"})
	require.NoError(t, err)
	hist, err := st.Load(b.ctx, runID, 0) // with its seed, which the client reads redacted
	require.NoError(t, err)
	s, err := core.Project(runID, hist)
	require.NoError(t, err)
	return s
}

// The history service writes a run's checkpoints as it follows the history (every 10 events
// here), at the stream position of the commit that holds the checkpoint's last event: a cold
// load in a fresh engine reads the checkpoint, checks it with one message, and reads only the
// tail, and its snapshot is the projection of the whole history.
func TestHistoryServiceWritesCheckpoints(t *testing.T) {
	t.Parallel()
	b := setupOwner(t)
	b.signalTicks(t, "ticks-1", 25, 20)
	want := b.projection(t, "ticks-1")
	// The last checkpoint crossed the boundary at 20 (commits applied together may take it a
	// few events further); the next boundary, 30, is not reached.
	cp, err := b.cps.Latest(b.ctx, "ticks-1")
	require.NoError(t, err)
	require.GreaterOrEqual(t, cp.Seq, uint64(20))
	require.Less(t, cp.Seq, uint64(30))
	require.LessOrEqual(t, cp.Seq, want.Seq)

	s, read := b.coldLoad(t, "ticks-1")
	require.True(t, reflect.DeepEqual(want, s), "the snapshot from the checkpoint and the tail differs from the projection")
	require.LessOrEqual(t, read, 1+want.Seq-cp.Seq, "the cold load read the checkpoint's commit and the tail only")
	require.Less(t, read, uint64(20), "the cold load did not read the whole history")
}

// The reconciler repairs FLOW_CHECKPOINTS, counting each repair: a checkpoint whose position
// does not match its run's history is deleted and written again at the run's latest snapshot; a
// checkpoint of a run that has no history, and one of a run that ended and was deleted, go. A
// pass after them repairs nothing.
func TestReconcilerRepairsCheckpoints(t *testing.T) {
	t.Parallel()
	b := setupOwner(t)
	ctx := b.ctx
	b.signalTicks(t, "ticks-1", 25, 20)
	_, err := b.client.Start(ctx, "short", nil, &flow.StartOptions{RunID: "short-1"})
	require.NoError(t, err)
	b.indexed(t, "short-1", status(core.StatusCompleted))
	b.clock.advance(2 * time.Hour)
	rep, err := b.h.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"short-1"}, rep.Deleted)
	b.indexed(t, "short-1", func(sum core.Summary) bool { return sum.Deleted != nil && sum.Deleted.Purged })

	// Nothing drifted yet.
	done, err := b.h.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, done[metrics.StateCheckpoints])

	// Drift, written as a foreign writer would: ticks-1's checkpoint names another commit, and
	// a ghost run and the deleted short-1 have checkpoints.
	cp, err := b.cps.Latest(ctx, "ticks-1")
	require.NoError(t, err)
	bad := *cp
	bad.Position = 1
	require.NoError(t, b.cps.Save(ctx, bad))
	for _, id := range []string{"ghost-1", "short-1"} {
		require.NoError(t, b.cps.Save(ctx, engine.Checkpoint{RunID: id, Seq: 2, Time: time.Now().UTC(), Position: 2, Snapshot: cp.Snapshot}))
	}

	before := metrics.Repairs(metrics.StateCheckpoints)
	done, err = b.h.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, done[metrics.StateCheckpoints], "ticks-1's rewritten, ghost-1's and short-1's deleted")
	require.Equal(t, before+3, metrics.Repairs(metrics.StateCheckpoints))
	for _, id := range []string{"ghost-1", "short-1"} {
		gone, err := b.cps.Info(ctx, id)
		require.NoError(t, err)
		require.Nil(t, gone, "run %s's checkpoint is deleted", id)
	}
	want := b.projection(t, "ticks-1")
	got, err := b.cps.Info(ctx, "ticks-1")
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, want.Seq, got.Seq, "written again at the run's latest snapshot")
	require.NotEqual(t, uint64(1), got.Position)
	s, read := b.coldLoad(t, "ticks-1")
	require.True(t, reflect.DeepEqual(want, s), "the rewritten checkpoint is the run's snapshot")
	require.LessOrEqual(t, read, uint64(1), "the rewritten checkpoint matches its position: one message checks it, no tail")

	done, err = b.h.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, done[metrics.StateCheckpoints])

	// The run goes on from the rewritten checkpoint: the worker reads it and the tail.
	_, err = b.client.Signal(ctx, "ticks-1", "stop", nil, nil)
	require.NoError(t, err)
	var n int
	require.NoError(t, b.client.Result(ctx, "ticks-1", &n))
	require.Equal(t, 26, n, "25 ticks and the stop")
}
