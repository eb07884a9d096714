package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
)

func TestEnsure(t *testing.T) {
	t.Parallel()
	js := emptyJetStream(t)
	ctx := t.Context()

	require.ErrorIs(t, streams.Check(ctx, js), streams.ErrNotProvisioned)
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{LeaseTTL: 3 * time.Second, DuplicateWindow: time.Minute}))
	require.NoError(t, streams.Check(ctx, js))

	leaseTTL := func() time.Duration {
		kv, err := js.KeyValue(ctx, streams.LeasesBucket)
		require.NoError(t, err)
		st, err := kv.Status(ctx)
		require.NoError(t, err)
		return st.TTL()
	}
	dupes := func() time.Duration {
		st, err := js.Stream(ctx, streams.History)
		require.NoError(t, err)
		return st.CachedInfo().Config.Duplicates
	}
	require.Equal(t, 3*time.Second, leaseTTL())
	require.Equal(t, time.Minute, dupes())

	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}), "a process without configuration")
	require.Equal(t, 3*time.Second, leaseTTL(), "does not reset the lease TTL to its default")
	require.Equal(t, time.Minute, dupes(), "nor the duplicate window")

	require.NoError(t, streams.Ensure(ctx, js, streams.Config{LeaseTTL: 5 * time.Second}))
	require.Equal(t, 5*time.Second, leaseTTL(), "an explicit setting is applied")

	workerTTL := func() (time.Duration, time.Duration) {
		kv, err := js.KeyValue(ctx, streams.WorkersBucket)
		require.NoError(t, err)
		st, err := kv.Status(ctx)
		require.NoError(t, err)
		return st.TTL(), st.LimitMarkerTTL()
	}
	ttl, marker := workerTTL()
	require.Equal(t, streams.DefaultWorkerTTL, ttl)
	require.Equal(t, streams.DefaultWorkerTTL, marker, "an expired worker entry leaves a marker for watchers")
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{WorkerTTL: 4 * time.Second}))
	ttl, marker = workerTTL()
	require.Equal(t, [2]time.Duration{4 * time.Second, 4 * time.Second}, [2]time.Duration{ttl, marker})
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{Replicas: 1}))
	ttl, _ = workerTTL()
	require.Equal(t, 4*time.Second, ttl, "a process without a WorkerTTL keeps the bucket's")

	err := streams.Ensure(ctx, js, streams.Config{Replicas: 7})
	require.ErrorIs(t, err, streams.ErrConfig)
	require.ErrorContains(t, err, "Replicas must be between 1 and 5")
	require.ErrorContains(t, streams.Ensure(ctx, js, streams.Config{WorkerTTL: time.Millisecond}), "WorkerTTL must be at least 1s")
}

func TestTaskSubjects(t *testing.T) {
	t.Parallel()
	require.Equal(t, "flow.task.default.order-1", streams.TaskSubject("", "", "order-1"))
	require.Equal(t, "flow.task.orders.b.v7.order-1", streams.TaskSubject("orders", "v7", "order-1"))
	dotted := streams.TaskSubject("orders", "v1.2.3", "order-1")
	require.Regexp(t, `^flow\.task\.orders\.b\.~[0-9a-f]{16}\.order-1$`, dotted, "a build ID that is no subject token is hashed")
	require.NotEqual(t, dotted, streams.TaskSubject("orders", "v1.2.4", "order-1"))
	for _, subject := range []string{"flow.task.orders.p=child=2", "flow.task.orders.b.v7.p=child=2", dotted[:len(dotted)-len("order-1")] + "p=child=2"} {
		run, err := streams.RunOfTask(subject)
		require.NoError(t, err, subject)
		require.Equal(t, "p=child=2", run)
	}
	for _, bad := range []string{"flow.history.x", "flow.task.orders", "flow.task.orders.x.v7.r", "flow.task.orders.b.v7"} {
		_, err := streams.RunOfTask(bad)
		require.Error(t, err, bad)
	}
}

// emptyJetStream starts an embedded server (package natsserver, as flowd does) for t, with no
// stream yet, and returns a JetStream client of it.
func emptyJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{Dir: t.TempDir(), NoListen: true, Logger: natstest.Logger()})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// AwaitProvisioned reports what is missing until Ensure has created every stream, then returns.
func TestAwaitProvisioned(t *testing.T) {
	t.Parallel()
	js := emptyJetStream(t)
	ctx := t.Context()
	missing, err := streams.Missing(ctx, js)
	require.NoError(t, err)
	require.Equal(t, streams.Names, missing)

	reported := make(chan []string, 1)
	done := make(chan error, 1)
	go func() {
		done <- streams.AwaitProvisioned(ctx, js, 10*time.Millisecond, func(m []string, err error) {
			select {
			case reported <- m:
			default:
			}
		})
	}()
	require.Equal(t, streams.Names, <-reported, "it reports every stream missing")
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitProvisioned did not return after Ensure created the streams")
	}
	missing, err = streams.Missing(ctx, js)
	require.NoError(t, err)
	require.Empty(t, missing)
	var created []string
	for name := range js.StreamNames(ctx).Name() {
		created = append(created, name)
	}
	require.ElementsMatch(t, streams.Names, created, "Names lists exactly what Ensure creates")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, streams.AwaitProvisioned(cancelled, js, time.Millisecond, nil), context.Canceled)
}
