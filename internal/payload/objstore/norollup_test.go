package objstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/payload"
)

// metaSubject is the subject of object name's metadata in the payload store.
func metaSubject(name string) string {
	return "$O." + streams.PayloadsBucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// writeObject writes data as object name of the payload store as nats.go's ObjectStore.Put lays
// objects out (one chunk, then the metadata), without the Nats-Rollup header that
// OBJ_FLOW_PAYLOADS refuses.
func writeObject(t *testing.T, ctx context.Context, js jetstream.JetStream, name string, data []byte) {
	t.Helper()
	id := nuid.Next()
	_, err := js.Publish(ctx, "$O."+streams.PayloadsBucket+".C."+id, data)
	require.NoError(t, err)
	h := sha256.New()
	h.Write(data)
	info := jetstream.ObjectInfo{Bucket: streams.PayloadsBucket, NUID: id, Size: uint64(len(data)), Chunks: 1,
		Digest: jetstream.GetObjectDigestValue(h), ObjectMeta: jetstream.ObjectMeta{Name: name}}
	b, err := json.Marshal(&info)
	require.NoError(t, err)
	_, err = js.Publish(ctx, metaSubject(name), b)
	require.NoError(t, err)
}

// writeDeletionRecord writes the record of object name's deletion, as a collector that stopped
// right after it leaves it (the object's chunks stay).
func writeDeletionRecord(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) {
	t.Helper()
	obs, err := js.ObjectStore(ctx, streams.PayloadsBucket)
	require.NoError(t, err)
	info, err := obs.GetInfo(ctx, name)
	require.NoError(t, err)
	info.Deleted = true
	info.Size, info.Chunks, info.Digest, info.ModTime = 0, 0, "", time.Time{}
	b, err := json.Marshal(info)
	require.NoError(t, err)
	_, err = js.Publish(ctx, metaSubject(name), b)
	require.NoError(t, err)
}

// OBJ_FLOW_PAYLOADS once allowed the Nats-Rollup header, which the store put on
// every metadata message, so that a writer (a worker, the ingress) could purge the whole stream
// with one `Nats-Rollup: all` message. Now the stream refuses the header: the writers store,
// touch and overwrite payloads without it, readers (this store's, nats.go's) read each object's
// last metadata message, and the collector's SweepChunks purges the superseded ones.
func TestPayloadsWithoutRollups(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	history, js, worker, wjs := asRoles(t)
	st, err := js.Stream(ctx, "OBJ_"+streams.PayloadsBucket)
	require.NoError(t, err)
	require.False(t, st.CachedInfo().Config.AllowRollup, "OBJ_FLOW_PAYLOADS allows rollups")

	data := []byte(`"` + strings.Repeat("n", 3000) + `"`)
	r, err := worker.Put(ctx, data)
	require.NoError(t, err)
	for range 3 { // touches
		_, err = worker.Put(ctx, data)
		require.NoError(t, err)
	}
	other := []byte(`"` + strings.Repeat("o", 3000) + `"`)
	kept, err := worker.Put(ctx, other)
	require.NoError(t, err)
	count := func(subject string) uint64 {
		si, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
		require.NoError(t, err)
		return si.State.Subjects[subject]
	}
	require.EqualValues(t, 4, count(metaSubject(r.Name())), "one metadata message per write and touch")

	// Readers read the last metadata message: this store's and nats.go's (clients').
	got, err := history.Get(ctx, r)
	require.NoError(t, err)
	require.Equal(t, data, got)
	obs, err := wjs.ObjectStore(ctx, streams.PayloadsBucket)
	require.NoError(t, err)
	got, err = obs.GetBytes(ctx, r.Name())
	require.NoError(t, err)
	require.Equal(t, data, got)
	objs, err := history.Objects(ctx)
	require.NoError(t, err)
	require.Len(t, objs, 2, "one object per name, whatever its metadata messages")

	// A writer's rollup of the whole stream is refused, and purges nothing.
	msg := nats.NewMsg(metaSubject(r.Name()))
	msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	msg.Data = []byte(`{}`)
	_, err = wjs.PublishMsg(ctx, msg)
	require.ErrorContains(t, err, "rollup not permitted")

	// The collector trims the superseded metadata messages, deletes an object, and stores of
	// the same bytes again work.
	_, err = history.SweepChunks(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, count(metaSubject(r.Name())))
	_, err = worker.Put(ctx, data) // a touch after the trim
	require.NoError(t, err)
	_, deleted, err := history.DeleteUnchanged(ctx, r.Name(), time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.True(t, deleted)
	require.Zero(t, count(metaSubject(r.Name())), "the deletion purges every metadata message of the object")
	_, err = history.Get(ctx, r)
	require.ErrorIs(t, err, payload.ErrNotFound)
	_, err = worker.Put(ctx, data)
	require.NoError(t, err)
	got, err = history.Get(ctx, r)
	require.NoError(t, err)
	require.Equal(t, data, got)
	got, err = history.Get(ctx, kept)
	require.NoError(t, err)
	require.Equal(t, other, got)
}
