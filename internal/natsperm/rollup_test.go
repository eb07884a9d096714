package natsperm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsperm"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/internal/payload/objstore"
)

// rollupRefused is JetStream's error code for a message with a Nats-Rollup header that its
// stream does not allow ("rollup not permitted").
const rollupRefused = 10111

// The purge without a purge permission: Flow's buckets and object stores
// allowed the Nats-Rollup header, so a worker, which may write FLOW_WORKERS, FLOW_HEARTBEATS and
// OBJ_FLOW_PAYLOADS, purged any of them whole with one `Nats-Rollup: all` message. Now (but on
// FLOW_WORKERS, whose limit markers need rollups, docs/operations.md) a
// deployment provisioned before (every bucket allowing rollups) is upgraded by the history
// service's start (streams.Provision), the other roles' start (streams.Ensure, which only reads)
// works before and after it, and the worker's rollups are refused by JetStream: every key and
// object stays.
func TestNoRoleRollsUpAStream(t *testing.T) {
	srv, v := runServer(t, "")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	hjs, err := jetstream.New(dial(t, srv, natsperm.History))
	require.NoError(t, err)
	wjs, err := jetstream.New(dial(t, srv, natsperm.Worker))
	require.NoError(t, err)

	// Streams as Flow provisioned them before: every bucket and object store allows rollups.
	require.NoError(t, streams.Ensure(ctx, hjs, streams.Config{}))
	rollups := func() []string {
		var on []string
		for _, name := range natsperm.AllStreams {
			st, err := hjs.Stream(ctx, name)
			require.NoError(t, err)
			if st.CachedInfo().Config.AllowRollup {
				on = append(on, name)
			}
		}
		return on
	}
	for _, name := range natsperm.AllStreams {
		if !strings.HasPrefix(name, "KV_") && !strings.HasPrefix(name, "OBJ_") {
			continue
		}
		st, err := hjs.Stream(ctx, name)
		require.NoError(t, err)
		cfg := st.CachedInfo().Config
		cfg.AllowRollup = true
		_, err = hjs.UpdateStream(ctx, cfg)
		require.NoError(t, err)
	}
	require.NoError(t, streams.Ensure(ctx, wjs, streams.Config{}), "a worker starts against streams not upgraded yet")
	require.NoError(t, streams.Ensure(ctx, hjs, streams.Config{}))
	require.Len(t, rollups(), len(natsperm.AllStreams)-3, "Ensure changes no stream it only reads")
	require.NoError(t, streams.Provision(ctx, hjs, streams.Config{}))
	// Not on the object stores the history service alone writes (with nats.go's ObjectStore.Put,
	// which rolls up), nor on the buckets with limit markers (nats-server requires rollups there).
	require.ElementsMatch(t, []string{"OBJ_" + streams.ArchiveBucket, "OBJ_" + streams.CheckpointsBucket,
		"KV_" + streams.WorkersBucket, "KV_" + streams.StartKeysBucket}, rollups(),
		"the history service's start turns rollups off")
	require.NoError(t, streams.Provision(ctx, hjs, streams.Config{}))
	require.NoError(t, streams.Ensure(ctx, wjs, streams.Config{}), "a worker starts against the upgraded streams")
	for _, line := range v.Seen() {
		require.NotContains(t, line, "flow-worker", "the worker's Ensure was refused something")
	}

	// What the worker writes: two keys in two buckets, two payloads.
	keys := map[string][]string{streams.DefinitionsBucket: {"default.a", "default.b"}, streams.HeartbeatsBucket: {"r1.s1", "r1.s2"}}
	for bucket, ks := range keys {
		kv, err := wjs.KeyValue(ctx, bucket)
		require.NoError(t, err)
		for _, k := range ks {
			_, err := kv.Put(ctx, k, []byte(`{}`))
			require.NoError(t, err)
		}
	}
	store, err := objstore.Open(ctx, wjs, streams.PayloadsBucket, 0)
	require.NoError(t, err)
	store.SetCacheBytes(0)
	a, err := store.Put(ctx, []byte(`"payload a"`))
	require.NoError(t, err)
	b, err := store.Put(ctx, []byte(`"payload b"`))
	require.NoError(t, err)

	for _, subject := range []string{"$KV." + streams.DefinitionsBucket + ".default.a", "$KV." + streams.HeartbeatsBucket + ".r1.s1",
		"$O." + streams.PayloadsBucket + ".M.probe"} {
		for _, how := range []string{jetstream.MsgRollupAll, jetstream.MsgRollupSubject} {
			msg := nats.NewMsg(subject)
			msg.Header.Set(jetstream.MsgRollup, how)
			msg.Data = []byte(`{}`)
			_, err := wjs.PublishMsg(ctx, msg)
			var apiErr *jetstream.APIError
			require.True(t, errors.As(err, &apiErr), "Nats-Rollup: %s on %s: %v", how, subject, err)
			require.Equal(t, rollupRefused, int(apiErr.ErrorCode), "Nats-Rollup: %s on %s: %v", how, subject, err)
		}
	}
	for bucket, ks := range keys {
		kv, err := wjs.KeyValue(ctx, bucket)
		require.NoError(t, err)
		for _, k := range ks {
			e, err := kv.Get(ctx, k)
			require.NoError(t, err, "key %s of %s", k, bucket)
			require.Equal(t, jetstream.KeyValuePut, e.Operation())
		}
	}
	for ref, want := range map[payload.Ref]string{a: `"payload a"`, b: `"payload b"`} {
		got, err := store.Get(ctx, ref)
		require.NoError(t, err)
		require.JSONEq(t, want, string(got))
	}
}
