package streams_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
)

// updates counts the stream and bucket updates asked through it.
type updates struct {
	jetstream.JetStream
	n atomic.Int32
}

func (u *updates) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	u.n.Add(1)
	return u.JetStream.UpdateStream(ctx, cfg)
}

func (u *updates) UpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	u.n.Add(1)
	return u.JetStream.UpdateKeyValue(ctx, cfg)
}

// stillRolling are the streams that keep allowing rollups: the object stores the history service
// alone writes with nats.go's ObjectStore.Put, and the buckets with limit markers.
var stillRolling = []string{"OBJ_" + streams.ArchiveBucket, "OBJ_" + streams.CheckpointsBucket,
	"KV_" + streams.WorkersBucket, "KV_" + streams.StartKeysBucket}

// Issue 20, finding 3 (a purge by one message with `Nats-Rollup: all`): Ensure creates Flow's
// buckets and the payload store allowing no rollups, and keeps them so when it updates a bucket
// (nats.go's UpdateKeyValue allows them); it leaves the setting of the streams it only reads, so
// that a process that may not update streams starts against streams created before; Provision
// turns rollups off on those. Each converges: called again, it updates nothing.
func TestRollupsOff(t *testing.T) {
	t.Parallel()
	js := &updates{JetStream: emptyJetStream(t)}
	ctx := t.Context()
	rolling := func() []string {
		var on []string
		for _, name := range streams.Names {
			st, err := js.Stream(ctx, name)
			require.NoError(t, err)
			if st.CachedInfo().Config.AllowRollup {
				on = append(on, name)
			}
		}
		return on
	}

	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}))
	require.ElementsMatch(t, stillRolling, rolling(), "created allowing rollups")
	js.n.Store(0)
	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}))
	require.Zero(t, js.n.Load(), "Provision and Ensure update streams that are as they should be")

	require.NoError(t, streams.Ensure(ctx, js, streams.Config{LeaseTTL: 4 * time.Second, WorkerTTL: 5 * time.Second}))
	require.ElementsMatch(t, stillRolling, rolling(), "an updated bucket allows rollups")
	js.n.Store(0)
	require.NoError(t, streams.Provision(ctx, js, streams.Config{LeaseTTL: 4 * time.Second, WorkerTTL: 5 * time.Second}))
	require.Zero(t, js.n.Load())

	// Streams created before Flow turned rollups off.
	for _, name := range streams.Names {
		if !strings.HasPrefix(name, "KV_") && !strings.HasPrefix(name, "OBJ_") {
			continue
		}
		st, err := js.Stream(ctx, name)
		require.NoError(t, err)
		cfg := st.CachedInfo().Config
		cfg.AllowRollup = true
		_, err = js.UpdateStream(ctx, cfg)
		require.NoError(t, err)
	}
	before := rolling()
	js.n.Store(0)
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}))
	require.Zero(t, js.n.Load(), "Ensure does not update a stream for its rollups")
	require.Equal(t, before, rolling())
	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
	require.ElementsMatch(t, stillRolling, rolling(), "Provision turns them off")
	js.n.Store(0)
	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
	require.Zero(t, js.n.Load())
}
