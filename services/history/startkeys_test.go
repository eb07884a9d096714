package history_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/services/history"
)

// The start key index through the history service, its one writer (jshost.RemoteStartKeys, as
// the ingress's engine asks it): create-only claims, replacement only at the revision read,
// release only by the run the entry names, expiry after the TTL, and each answer what the
// bucket holds. A request that names no start key is refused as such, not as unavailable.
func TestStartKeysThroughTheHistoryService(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startService(t, srv, history.Config{ReconcileInterval: -1, RetentionSweep: -1})
	ctx := t.Context()
	kv, err := natstest.JetStream(t, srv).KeyValue(ctx, streams.StartKeysBucket)
	require.NoError(t, err)
	holds := func(key string) (engine.KeyEntry, uint64) {
		t.Helper()
		e, err := kv.Get(ctx, key)
		require.NoError(t, err)
		var got engine.KeyEntry
		require.NoError(t, json.Unmarshal(e.Value(), &got))
		return got, e.Revision()
	}
	keys := jshost.NewRemoteStartKeys(natstest.Connect(t, srv))
	until := time.Now().Add(time.Hour).UTC().Round(time.Millisecond)
	a := engine.KeyEntry{RunID: "run-a", Key: "invoice-42", Until: until}
	b := engine.KeyEntry{RunID: "run-b", Key: "invoice-42", Until: until}
	key := engine.DedupIndexKey("charge", "invoice-42")

	got, rev, claimed, err := keys.ClaimKey(ctx, key, a, time.Hour)
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, a, got)
	stored, storedRev := holds(key)
	require.Equal(t, a, stored, "the history service wrote the entry")
	require.Equal(t, storedRev, rev)

	got, rev2, claimed, err := keys.ClaimKey(ctx, key, b, time.Hour)
	require.NoError(t, err)
	require.False(t, claimed, "a claimed key is not claimed again")
	require.Equal(t, a, got, "the answer is the key's entry")
	require.Equal(t, rev, rev2)

	_, ok, err := keys.ReplaceKey(ctx, key, rev+100, b, time.Hour)
	require.NoError(t, err)
	require.False(t, ok, "a replacement at a stale revision writes nothing")
	rev3, ok, err := keys.ReplaceKey(ctx, key, rev, b, time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	stored, storedRev = holds(key)
	require.Equal(t, b, stored)
	require.Equal(t, storedRev, rev3)

	require.NoError(t, keys.ReleaseKey(ctx, key, "run-a"), "another run's release")
	stored, _ = holds(key)
	require.Equal(t, "run-b", stored.RunID, "a release by another run leaves the entry")
	require.NoError(t, keys.ReleaseKey(ctx, key, "run-b"))
	_, err = kv.Get(ctx, key)
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the entry's run released it")
	require.NoError(t, keys.ReleaseKey(ctx, engine.DedupIndexKey("charge", "absent"), "run-a"), "releasing an absent key")

	// A debounce key has no TTL; a dedup key's TTL frees it.
	_, _, claimed, err = keys.ClaimKey(ctx, engine.DebounceIndexKey("index", "doc-9"), engine.KeyEntry{RunID: "run-d", Key: "doc-9"}, 0)
	require.NoError(t, err)
	require.True(t, claimed)
	ttlKey := engine.DedupIndexKey("charge", "ttl")
	_, _, claimed, err = keys.ClaimKey(ctx, ttlKey, a, time.Second)
	require.NoError(t, err)
	require.True(t, claimed)
	require.Eventually(t, func() bool {
		_, _, claimed, err := keys.ClaimKey(ctx, ttlKey, b, time.Second)
		require.NoError(t, err)
		return claimed
	}, 10*time.Second, 50*time.Millisecond, "the entry expires after its TTL")

	// Requests that are not start key operations.
	_, _, _, err = keys.ClaimKey(ctx, "runs.x", a, 0)
	require.ErrorContains(t, err, `"runs.x" is not a start key`)
	require.NotErrorIs(t, err, engine.ErrStartKeysUnavailable)
	_, _, _, err = keys.ClaimKey(ctx, key, engine.KeyEntry{Key: "k"}, 0)
	require.ErrorContains(t, err, "the entry's run")
	_, _, err = keys.ReplaceKey(ctx, key, 0, a, 0)
	require.ErrorContains(t, err, "needs the revision of the entry it replaces")
	// A reset lock that would never expire, or outlive its bound, is refused.
	for _, ttl := range []time.Duration{0, time.Hour} {
		_, _, _, err = keys.ClaimKey(ctx, engine.ResetLockKey("wf"), a, ttl)
		require.ErrorContains(t, err, "a lock whose holder dies must expire")
	}
	_, _, claimed, err = keys.ClaimKey(ctx, engine.ResetLockKey("wf"), a, engine.ResetLockTTL)
	require.NoError(t, err)
	require.True(t, claimed)
}

// With no history service running, a start key operation fails at once with an error wrapping
// engine.ErrStartKeysUnavailable that says what to start; nothing is written.
func TestStartKeysWithoutTheHistoryService(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	js := natstest.JetStream(t, srv)
	require.NoError(t, streams.Ensure(t.Context(), js, streams.Config{}))
	keys := jshost.NewRemoteStartKeys(natstest.Connect(t, srv))
	began := time.Now()
	_, _, _, err := keys.ClaimKey(t.Context(), engine.DedupIndexKey("charge", "k"), engine.KeyEntry{RunID: "run-a", Key: "k"}, time.Hour)
	require.ErrorIs(t, err, engine.ErrStartKeysUnavailable)
	require.ErrorContains(t, err, "no history service answers on flow.derived.startkeys.claim")
	require.ErrorContains(t, err, "start `flowd history`")
	require.Less(t, time.Since(began), jshost.RemoteKeysTimeout, "no responders is known at once")
	_, _, err = keys.ReplaceKey(t.Context(), engine.DedupIndexKey("charge", "k"), 1, engine.KeyEntry{RunID: "run-a", Key: "k"}, 0)
	require.ErrorIs(t, err, engine.ErrStartKeysUnavailable)
	require.ErrorIs(t, keys.ReleaseKey(t.Context(), engine.DedupIndexKey("charge", "k"), "run-a"), engine.ErrStartKeysUnavailable)
	st, err := js.Stream(t.Context(), "KV_"+streams.StartKeysBucket)
	require.NoError(t, err)
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs)
}
