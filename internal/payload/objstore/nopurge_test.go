package objstore_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsperm"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/internal/payload/objstore"
)

// asRoles starts a server whose users have the history and worker roles' permissions, and
// returns a store opened by each, with its JetStream context. The worker's connection fails the
// test on any asynchronous error, a refused publish included.
func asRoles(t *testing.T) (history *objstore.Store, historyJS jetstream.JetStream, worker *objstore.Store, workerJS jetstream.JetStream) {
	t.Helper()
	users := []*server.User{}
	for _, name := range []string{natsperm.History, natsperm.Worker} {
		r, err := natsperm.Get(name)
		require.NoError(t, err)
		users = append(users, &server.User{Username: r.User, Password: "pw", Permissions: r.Permissions()})
	}
	srv := natstest.RunServer(t, &server.Options{JetStream: true, Users: users})
	open := func(name, inbox string, opts ...nats.Option) (*objstore.Store, jetstream.JetStream) {
		nc, err := nats.Connect(srv.ClientURL(), append(opts, nats.UserInfo(name, "pw"), nats.CustomInboxPrefix(inbox))...)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		if name == "flow-history" {
			require.NoError(t, streams.Ensure(t.Context(), js, streams.Config{}))
		}
		s, err := objstore.Open(t.Context(), js, streams.PayloadsBucket, 16)
		require.NoError(t, err)
		s.SetCacheBytes(0)
		return s, js
	}
	history, historyJS = open("flow-history", "_INBOX.history")
	worker, workerJS = open("flow-worker", "_INBOX.worker", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		t.Errorf("the worker's connection: %v", err)
	}))
	return history, historyJS, worker, workerJS
}

// A writer without the purge permission (a worker, the ingress) stores payloads: new ones, ones
// there already (a touch), ones the bucket holds under their name with other bytes, and the same
// payload from several writers at once, each Put returning with the payload readable, and no
// publish refused. nats.go's ObjectStore.Put purges the chunks of the object it replaces, so a
// store built on it would need every writer to hold the purge permission on OBJ_FLOW_PAYLOADS.
func TestPutNeedsNoPurge(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	history, js, worker, _ := asRoles(t)
	data := []byte(`"` + strings.Repeat("w", 3000) + `"`)
	r, err := worker.Put(ctx, data)
	require.NoError(t, err)
	_, err = worker.Put(ctx, data) // a touch
	require.NoError(t, err)
	got, err := history.Get(ctx, r)
	require.NoError(t, err)
	require.Equal(t, data, got)

	// Other bytes under the payload's name (the collector's deletion record, here a corrupt
	// object), written by the owner: the worker stores the payload over it.
	other := []byte(`"` + strings.Repeat("x", 10) + `"`)
	bad := payload.RefOf(data)
	// The store is content-addressed: the bad object is written by hand.
	writeObject(t, ctx, js, bad.Name(), other)
	_, err = worker.Get(ctx, bad)
	require.Error(t, err, "the object holds other bytes")
	_, err = worker.Put(ctx, data)
	require.NoError(t, err)
	got, err = worker.Get(ctx, bad)
	require.NoError(t, err)
	require.Equal(t, data, got)

	// Eight writers of one new payload at once.
	race := bytes.Repeat([]byte("r"), 2*512<<10+7) // three chunks
	race[0], race[len(race)-1] = '"', '"'
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, err := worker.Put(ctx, race)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	got, err = history.Get(ctx, payload.RefOf(race))
	require.NoError(t, err)
	require.Equal(t, race, got)
}

// The chunks no object names, of an upload that failed or lost its race, are purged by the
// collector's SweepChunks once older than its cutoff; the chunks of objects stay.
func TestSweepChunksPurgesOrphans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	history, _, worker, js := asRoles(t)
	data := []byte(`"` + strings.Repeat("k", 3000) + `"`)
	r, err := worker.Put(ctx, data)
	require.NoError(t, err)
	// An upload that stopped after its first chunk.
	_, err = js.Publish(ctx, "$O."+streams.PayloadsBucket+".C.orphan", []byte("half"))
	require.NoError(t, err)

	n, err := history.SweepChunks(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "younger than the cutoff")
	n, err = history.SweepChunks(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	stream, err := js.Stream(ctx, "OBJ_"+streams.PayloadsBucket)
	require.NoError(t, err)
	_, err = stream.GetLastMsgForSubject(ctx, "$O."+streams.PayloadsBucket+".C.orphan")
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
	got, err := worker.Get(ctx, r)
	require.NoError(t, err)
	require.Equal(t, data, got)
}
