package jshost_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natstest"
)

// Both start key indexes behave alike: create-only claims, replacement only at the revision
// read, release only by the run the entry names, and expiry after the TTL.
func TestStartKeys(t *testing.T) {
	ctx := t.Context()
	js := natstest.NewJetStream(t)
	onJS, err := jshost.NewStartKeys(ctx, js)
	require.NoError(t, err)
	for name, keys := range map[string]engine.StartKeys{"jetstream": onJS, "memory": &engine.MemoryKeys{}} {
		t.Run(name, func(t *testing.T) {
			a := engine.KeyEntry{RunID: "run-a", Key: "k"}
			b := engine.KeyEntry{RunID: "run-b", Key: "k"}

			got, rev, claimed, err := keys.ClaimKey(ctx, "dedup.d.k1", a, 0)
			require.NoError(t, err)
			require.True(t, claimed)
			require.Equal(t, a, got)

			got, rev2, claimed, err := keys.ClaimKey(ctx, "dedup.d.k1", b, 0)
			require.NoError(t, err)
			require.False(t, claimed, "a claimed key is not claimed again")
			require.Equal(t, "run-a", got.RunID)
			require.Equal(t, rev, rev2)

			_, ok, err := keys.ReplaceKey(ctx, "dedup.d.k1", rev+100, b, 0)
			require.NoError(t, err)
			require.False(t, ok, "a replacement at a stale revision writes nothing")
			rev3, ok, err := keys.ReplaceKey(ctx, "dedup.d.k1", rev, b, 0)
			require.NoError(t, err)
			require.True(t, ok)
			_, rev4, _, err := keys.ClaimKey(ctx, "dedup.d.k1", a, 0)
			require.NoError(t, err)
			require.Equal(t, rev3, rev4, "the revision of the replacement")
			got, _, _, err = keys.ClaimKey(ctx, "dedup.d.k1", a, 0)
			require.NoError(t, err)
			require.Equal(t, "run-b", got.RunID)

			require.NoError(t, keys.ReleaseKey(ctx, "dedup.d.k1", "run-a"), "another run's release")
			got, _, claimed, err = keys.ClaimKey(ctx, "dedup.d.k1", a, 0)
			require.NoError(t, err)
			require.False(t, claimed)
			require.Equal(t, "run-b", got.RunID, "a release by another run leaves the entry")
			require.NoError(t, keys.ReleaseKey(ctx, "dedup.d.k1", "run-b"))
			_, _, claimed, err = keys.ClaimKey(ctx, "dedup.d.k1", a, 0)
			require.NoError(t, err)
			require.True(t, claimed, "a released key is free")
			require.NoError(t, keys.ReleaseKey(ctx, "dedup.d.absent", "run-a"), "releasing an absent key")

			// Expiry: an entry with a TTL frees its key.
			_, _, claimed, err = keys.ClaimKey(ctx, "dedup.d.ttl", a, time.Second)
			require.NoError(t, err)
			require.True(t, claimed)
			require.Eventually(t, func() bool {
				_, _, claimed, err := keys.ClaimKey(ctx, "dedup.d.ttl", b, time.Second)
				require.NoError(t, err)
				return claimed
			}, 10*time.Second, 50*time.Millisecond, "the entry expires after its TTL")
		})
	}
}
