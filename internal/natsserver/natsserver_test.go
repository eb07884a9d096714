package natsserver_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natsserver"
)

// shutdownBound is the bound the tests give ShutdownWithin.
const shutdownBound = 2 * time.Second

func startServer(t *testing.T, dir string) *natsserver.Server {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{Dir: dir, NoListen: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	return srv
}

func keyValue(t *testing.T, srv *natsserver.Server, bucket string) jetstream.KeyValue {
	t.Helper()
	nc, err := srv.Connect()
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	// The configuration of Flow's buckets: the last value of each key, on disk.
	kv, err := js.CreateOrUpdateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: bucket, History: 1,
		Storage: jetstream.FileStorage})
	require.NoError(t, err)
	return kv
}

// definition is a value shaped like the FLOW_DEFINITIONS entries a worker publishes at start.
func definition(name string) []byte {
	return fmt.Appendf(nil, `{"definition":%q,"queue":"default","updated_at":"2026-01-02T03:04:05.123456789Z","host":"flow-dev"}`, name)
}

// lastBlock returns the path of the last message block of stream.
func lastBlock(t *testing.T, dir, stream string) string {
	t.Helper()
	blks, err := filepath.Glob(filepath.Join(dir, "jetstream", "$G", "streams", stream, "msgs", "*.blk"))
	require.NoError(t, err)
	require.NotEmpty(t, blks)
	sort.Slice(blks, func(i, j int) bool {
		if len(blks[i]) != len(blks[j]) {
			return len(blks[i]) < len(blks[j])
		}
		return blks[i] < blks[j]
	})
	return blks[len(blks)-1]
}

func TestShutdownWithinStopsHealthyServer(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	kv := keyValue(t, srv, "FLOW_DEFINITIONS")
	_, err := kv.Put(t.Context(), "default.order", definition("order"))
	require.NoError(t, err)

	require.NoError(t, srv.ShutdownWithin(shutdownBound))
	require.False(t, srv.NATS().Running())
	// Repeated calls, and Shutdown after ShutdownWithin, return at once.
	require.NoError(t, srv.ShutdownWithin(time.Millisecond))
	srv.Shutdown()
}

// A disk that garbles a few bytes in the middle of a KV block, under an intact index.db, makes
// nats-server v2.15.2 loop forever in fileStore.storeRawMsg when a key of the garbled message is
// written again (its per-subject limit loop removes a message the block no longer counts), with
// the stream's lock held; server.Shutdown then blocks on that lock. This is what `flow dev` hit
// after "Stopped." on a damaged FLOW_DEFINITIONS or FLOW_RUNS bucket. ShutdownWithin must still
// return within its bound.
func TestShutdownWithinReturnsOnDamagedKVBlock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := []string{"fanout", "order", "reminder"}

	srv := startServer(t, dir)
	kv := keyValue(t, srv, "FLOW_DEFINITIONS")
	for _, k := range keys {
		_, err := kv.Put(t.Context(), "default."+k, definition(k))
		require.NoError(t, err)
	}
	require.NoError(t, srv.ShutdownWithin(shutdownBound))

	// Garble the middle of the block: the payload of the second message.
	blk := lastBlock(t, dir, "KV_FLOW_DEFINITIONS")
	f, err := os.OpenFile(blk, os.O_RDWR, 0)
	require.NoError(t, err)
	st, err := f.Stat()
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("GARBAGEGARBAGEGARBAGE"), st.Size()/2)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	// Restart and publish the definitions again, as a worker does at start.
	srv = startServer(t, dir)
	kv = keyValue(t, srv, "FLOW_DEFINITIONS")
	wedged := false
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := kv.Put(ctx, "default."+k, definition(k))
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			wedged = true
			break
		}
	}
	require.True(t, wedged, "no put hung on the damaged block: has nats-server fixed its per-subject limit loop? "+
		"Then this test only checks that shutdown is bounded, and the expectations below can go")

	start := time.Now()
	err = srv.ShutdownWithin(shutdownBound)
	elapsed := time.Since(start)
	require.Less(t, elapsed, shutdownBound+time.Second)
	require.ErrorIs(t, err, natsserver.ErrShutdownTimeout)
	require.ErrorContains(t, err, "server.Shutdown has not returned")
	t.Log(err)

	// A second call does not start another stop, and is bounded too.
	start = time.Now()
	require.ErrorIs(t, srv.ShutdownWithin(100*time.Millisecond), natsserver.ErrShutdownTimeout)
	require.Less(t, time.Since(start), time.Second)
}
