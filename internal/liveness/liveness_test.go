package liveness_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/definitions"
	"github.com/flowrun/flow/internal/liveness"
	"github.com/flowrun/flow/internal/natstest"
)

var quiet = natstest.Logger()

const deadline = 10 * time.Second

func worker(id, queue, build string, defs ...string) liveness.Worker {
	w := liveness.Worker{ID: id, Name: id, Queue: queue, BuildID: build, Host: "test-host", PID: 1}
	for _, d := range defs {
		w.Definitions = append(w.Definitions, liveness.Registration{Definition: d, Patches: []string{d + "-patch"}})
	}
	return w
}

func TestViewFollowsWorkers(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	ctx := t.Context()
	js := natstest.JetStream(t, srv)
	defs, err := js.KeyValue(ctx, streams.DefinitionsBucket)
	require.NoError(t, err)
	old := time.Now().Add(-2 * time.Hour).UTC()
	b, err := json.Marshal(definitions.Definition{Definition: "legacy", Queue: "q", BuildID: "v0", UpdatedAt: old})
	require.NoError(t, err)
	_, err = defs.Put(ctx, definitions.Key("q", "legacy"), b)
	require.NoError(t, err)

	a, err := liveness.Publish(ctx, natstest.JetStream(t, srv), worker("a", "q", "v1", "beta", "alpha"), quiet)
	require.NoError(t, err)
	require.Equal(t, "alpha", a.Entry().Definitions[0].Definition, "registrations are sorted")
	require.False(t, a.Entry().StartedAt.IsZero())

	v, err := liveness.Watch(ctx, js, quiet)
	require.NoError(t, err)
	t.Cleanup(v.Stop)
	require.Equal(t, streams.DefaultWorkerTTL, v.TTL())

	d, ok := v.Serves("q", "alpha")
	require.True(t, ok, "the entry written before Watch is known once Watch returns")
	require.Equal(t, "v1", d.BuildID)
	require.Equal(t, []string{"alpha-patch"}, d.Patches)
	require.Len(t, d.Workers, 1)
	require.Equal(t, "a", d.Workers[0].ID)
	_, ok = v.Serves("q", "gamma")
	require.False(t, ok)
	_, ok = v.Serves("other", "alpha")
	require.False(t, ok, "queues are apart")

	p, err := liveness.Publish(ctx, js, worker("b", "q", "v2", "alpha", "gamma"), quiet)
	require.NoError(t, err)
	require.Eventually(t, func() bool { d, ok := v.Serves("q", "gamma"); return ok && len(d.Workers) == 1 }, deadline, 5*time.Millisecond)
	d, err = v.Require("q", "alpha")
	require.NoError(t, err)
	require.Equal(t, []string{"b", "a"}, []string{d.Workers[0].ID, d.Workers[1].ID}, "the last started first")
	require.Equal(t, "v2", d.BuildID, "the spec of the last started worker")

	fetched, err := v.Fetch(ctx, "q")
	require.NoError(t, err)
	require.Len(t, fetched, 2)
	require.Equal(t, "a", fetched[0].ID)
	require.Len(t, v.Workers("q"), 2)
	require.Len(t, v.Workers(""), 2)
	require.Empty(t, v.Workers("other"))

	list := v.List()
	var names []string
	for _, d := range list {
		names = append(names, d.Queue+"/"+d.Definition)
	}
	require.Equal(t, []string{"q/alpha", "q/beta", "q/gamma", "q/legacy"}, names)
	require.Empty(t, list[3].Workers)
	require.Equal(t, "v0", list[3].BuildID, "a definition no live worker registers shows its latest registration")

	require.NoError(t, p.Stop(ctx))
	require.NoError(t, p.Stop(ctx), "Stop is idempotent")
	kv, err := js.KeyValue(ctx, streams.WorkersBucket)
	require.NoError(t, err)
	_, err = kv.Get(ctx, liveness.Key("q", "b"))
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "Stop deletes the entry")
	require.Eventually(t, func() bool { _, ok := v.Serves("q", "gamma"); return !ok }, deadline, 5*time.Millisecond)

	_, err = v.Require("q", "gamma")
	require.ErrorIs(t, err, liveness.ErrNoWorker)
	var nw *liveness.NoWorkerError
	require.ErrorAs(t, err, &nw)
	require.False(t, nw.LastSeen.IsZero())
	require.Regexp(t, `^no live worker serves workflow "gamma" on queue "q" \(last worker seen (just now|\ds ago); known on this queue: alpha, beta\); start a worker that registers it \(flow dev, or your own with pkg/flow/worker\)$`, err.Error())

	_, err = v.Require("q", "legacy")
	require.ErrorContains(t, err, `(registered 2h ago, no live worker seen since; known on this queue: alpha, beta)`)
	_, err = v.Require("", "nothing")
	require.EqualError(t, err, `no live worker serves workflow "nothing" on queue "default" (never registered; no live worker on this queue); start a worker that registers it (flow dev, or your own with pkg/flow/worker)`)
	require.NoError(t, a.Stop(ctx))
}

// A worker that dies without stopping is gone from the View once its entry's TTL passes.
func TestDeadWorkerExpires(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	ctx := t.Context()
	js := natstest.JetStream(t, srv)
	// Workers beat every third of the TTL: 5 s leaves the live worker 3.3 s to write each
	// heartbeat in time, which a heavily loaded machine was seen to need more than 1.3 s of.
	const ttl = 5 * time.Second
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{WorkerTTL: ttl}))
	v, err := liveness.Watch(ctx, js, quiet)
	require.NoError(t, err)
	t.Cleanup(v.Stop)
	require.Equal(t, ttl, v.TTL())

	alive, err := liveness.Publish(ctx, js, worker("alive", "q", "", "alpha"), quiet)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, alive.Stop(context.Background())) })
	nc := natstest.Connect(t, srv)
	djs, err := jetstream.New(nc)
	require.NoError(t, err)
	dead, err := liveness.Publish(ctx, djs, worker("dead", "q", "", "beta"), quiet)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := v.Serves("q", "beta"); return ok }, deadline, 5*time.Millisecond)
	nc.Close() // the process dies: no more heartbeats, no delete

	var gone *liveness.NoWorkerError
	require.Eventually(t, func() bool { _, err := v.Require("q", "beta"); return errors.As(err, &gone) }, deadline+2*ttl, 10*time.Millisecond)
	// Not before its TTL, counted from its last heartbeat: the last one it wrote, which the
	// view saw before the entry expired. (Counted from the close it can be less: a heartbeat
	// that comes late under load leaves the last one written further before the close.)
	require.GreaterOrEqual(t, gone.At.Sub(gone.LastSeen), ttl, "not before its TTL")
	_, ok := v.Serves("q", "alpha")
	require.True(t, ok, "a worker that beats outlives the TTL")
	_, err = v.Require("q", "alpha")
	require.NoError(t, err)
	require.Error(t, dead.Stop(ctx), "the entry cannot be deleted on a closed connection")
}

func TestPublishRefusesBadKeys(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	_, err := liveness.Publish(t.Context(), natstest.JetStream(t, srv), worker("a.b", "q", ""), quiet)
	require.ErrorContains(t, err, `worker ID "a.b" and queue "q" must be non-empty and hold only letters, digits, '-' and '_'`)
	require.Regexp(t, `^my-host-local-42-[0-9a-f]{8}$`, liveness.NewID("my.host.local", 42))
	require.NotEqual(t, liveness.NewID("h", 1), liveness.NewID("h", 1))
}

// The View answers from many goroutines while it follows the bucket.
func TestViewConcurrentReads(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	ctx := t.Context()
	js := natstest.JetStream(t, srv)
	v, err := liveness.Watch(ctx, js, quiet)
	require.NoError(t, err)
	t.Cleanup(v.Stop)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v.Serves("q", "alpha")
				v.List()
				v.Workers("")
			}
		})
	}
	for i := range 10 {
		p, err := liveness.Publish(ctx, js, worker(liveness.NewID("h", i), "q", "", "alpha"), quiet)
		require.NoError(t, err)
		require.NoError(t, p.Stop(ctx))
	}
	close(stop)
	wg.Wait()
	require.Eventually(t, func() bool { return len(v.Workers("q")) == 0 }, deadline, 5*time.Millisecond)
}
