package history_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
)

// The reconciler releases the start keys that name no run a start could be given, counting each
// release: a debounce key of a run past its delay (or never delayed), one of a run that ended,
// an entry that is no entry, a key of a run that was deleted, and a key of a run without
// history once its start can no longer be on its way (5 minutes after the claim). A debounce key
// of a run still delayed, a dedup key of an ended run, and a fresh key of a run without history
// (a start in flight) stay.
func TestReconcilerReleasesStaleStartKeys(t *testing.T) {
	t.Parallel()
	b := setupOwner(t)
	ctx := b.ctx
	for id, opts := range map[string]*flow.StartOptions{
		"await-1":   {RunID: "await-1"},
		"delayed-1": {RunID: "delayed-1", Delay: time.Hour}, // no scheduler: it stays delayed
	} {
		_, err := b.client.Start(ctx, "await", nil, opts)
		require.NoError(t, err)
		b.indexed(t, id, status(core.StatusSuspended))
	}
	for _, id := range []string{"steps-1", "short-1"} {
		_, err := b.client.Start(ctx, id[:len(id)-2], 1, &flow.StartOptions{RunID: id})
		require.NoError(t, err)
		b.indexed(t, id, status(core.StatusCompleted))
	}

	kv, err := natstest.JetStream(t, b.srv).KeyValue(ctx, streams.StartKeysBucket)
	require.NoError(t, err)
	put := func(key, runID string) {
		t.Helper()
		v, err := json.Marshal(engine.KeyEntry{RunID: runID, Key: "k"})
		require.NoError(t, err)
		_, err = kv.Put(ctx, key, v)
		require.NoError(t, err)
	}
	has := func(key string) bool {
		t.Helper()
		_, err := kv.Get(ctx, key)
		if err == nil {
			return true
		}
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
		return false
	}
	// Drift, written as a foreign writer or a lost release would leave it.
	active, delayed := engine.DebounceIndexKey("await", "active"), engine.DebounceIndexKey("await", "delayed")
	ended, dedup := engine.DebounceIndexKey("steps", "ended"), engine.DedupIndexKey("steps", "dedup")
	ghost, deleted := engine.DedupIndexKey("await", "ghost"), engine.DedupIndexKey("short", "deleted")
	junk := engine.DebounceIndexKey("await", "junk")
	put(active, "await-1")
	put(delayed, "delayed-1")
	put(ended, "steps-1")
	put(dedup, "steps-1")
	put(ghost, "ghost-1")
	put(deleted, "short-1")
	_, err = kv.Put(ctx, junk, []byte("not an entry"))
	require.NoError(t, err)

	before := metrics.Repairs(metrics.StateStartKeys)
	done, err := b.h.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, done[metrics.StateStartKeys], "the debounce keys of await-1 (not delayed) and steps-1 (ended), and the junk")
	require.Equal(t, before+3, metrics.Repairs(metrics.StateStartKeys))
	for key, want := range map[string]bool{active: false, ended: false, junk: false, delayed: true, dedup: true, ghost: true, deleted: true} {
		require.Equal(t, want, has(key), "key %s", key)
	}

	// Two hours later: short-1 is deleted after its retention period, and ghost-1's key is past
	// the time its start could take.
	b.clock.advance(2 * time.Hour)
	rep, err := b.h.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"short-1"}, rep.Deleted)
	b.indexed(t, "short-1", func(sum core.Summary) bool { return sum.Deleted != nil && sum.Deleted.Purged })
	done, err = b.h.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, done[metrics.StateStartKeys], "the keys of the deleted short-1 and of ghost-1, which never started")
	for key, want := range map[string]bool{ghost: false, deleted: false, delayed: true, dedup: true} {
		require.Equal(t, want, has(key), "key %s", key)
	}

	done, err = b.h.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, done[metrics.StateStartKeys])
}
