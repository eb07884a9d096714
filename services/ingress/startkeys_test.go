package ingress_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// The ingress writes no start key: with no history service running, a start with a dedup key
// or a debounce is refused at once with the retryable unavailable error (503 over HTTP) saying
// the history service writes start keys, and nothing is written; a plain start is unaffected.
// Once a history service runs, the same start succeeds.
func TestKeyedStartsNeedTheHistoryService(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b, _ := setupParts(t, ingress.Config{}, parts{noHistory: true, noScheduler: true})
	srv, client := b.srv, b.client
	var err error

	// The worker registers "gate" a moment after it started.
	require.Eventually(t, func() bool {
		_, err = client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "plain-1"})
		return !errors.Is(err, flow.ErrNoWorker)
	}, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, err, "a plain start needs no history service")

	unavailable := func(err error) {
		t.Helper()
		var e *api.IngressError
		require.ErrorAs(t, err, &e)
		require.Equal(t, api.CodeIngressBusy, e.Code, e.Message)
		require.Contains(t, e.Message, "no history service answers")
		require.Contains(t, e.Message, "start `flowd history`")
	}
	began := time.Now()
	_, err = client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "dedup-1", DedupKey: "invoice-42", DedupWindow: time.Hour})
	unavailable(err)
	_, err = client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "debounce-1", Debounce: &flow.Debounce{Key: "doc-9", Period: time.Second}})
	unavailable(err)
	require.Less(t, time.Since(began), 10*time.Second, "refused at once, not after a timeout")
	status, _, bad := b.post(t, "gate", `{"run_id":"dedup-2","dedup_key":"invoice-42","dedup_window":"1h"}`)
	require.Equal(t, http.StatusServiceUnavailable, status, bad.Message)
	require.Contains(t, bad.Message, "no history service answers")
	for _, id := range []string{"dedup-1", "debounce-1", "dedup-2"} {
		_, err := client.Snapshot(ctx, id)
		require.Error(t, err, "run %s was not started", id)
	}
	st, err := b.js.Stream(ctx, "KV_"+streams.StartKeysBucket)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "nothing was written to %s", streams.StartKeysBucket)

	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { _ = h.Stop() })
	id, err := client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "dedup-1", DedupKey: "invoice-42", DedupWindow: time.Hour})
	require.NoError(t, err)
	require.Equal(t, "dedup-1", id)
	id, err = client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "dedup-3", DedupKey: "invoice-42", DedupWindow: time.Hour})
	require.NoError(t, err)
	require.Equal(t, "dedup-1", id, "the key the history service wrote for the first start")
}

// connectAs connects to srv with inbox prefix prefix: the replies to its writes, which a spy
// sees, name it.
func connectAs(t *testing.T, srv *natsserver.Server, prefix string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL(), natsconn.SyncQueue, nats.CustomInboxPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// writeSpy receives every publish to the subjects of FLOW_START_KEYS and FLOW_CHECKPOINTS: each
// write, with the reply inbox of the connection that made it.
type writeSpy struct {
	writes chan *nats.Msg
	seen   map[string]uint64
}

// spyOnWrites subscribes to the buckets' subjects before any service starts.
func spyOnWrites(t *testing.T, srv *natsserver.Server) *writeSpy {
	t.Helper()
	nc := natstest.Connect(t, srv)
	sp := &writeSpy{writes: make(chan *nats.Msg, 1<<14), seen: map[string]uint64{}}
	for _, subject := range []string{"$KV." + streams.StartKeysBucket + ".>", "$O." + streams.CheckpointsBucket + ".>"} {
		sub, err := nc.ChanSubscribe(subject, sp.writes)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, nc.Flush())
	return sp
}

// streamOf names the stream that stores a write to subject.
func streamOf(subject string) string {
	if strings.HasPrefix(subject, "$KV.") {
		return "KV_" + streams.StartKeysBucket
	}
	return "OBJ_" + streams.CheckpointsBucket
}

// fromHistory checks the writes to both buckets so far: the spy receives as many as each stream
// stored (its last sequence), and any it refused (a compare-and-set that lost), each made by the
// connection whose inbox prefix is _INBOX.history.
func (sp *writeSpy) fromHistory(t *testing.T, srv *natsserver.Server) {
	t.Helper()
	js := natstest.JetStream(t, srv)
	check := func(m *nats.Msg) {
		sp.seen[streamOf(m.Subject)]++
		require.True(t, strings.HasPrefix(m.Reply, "_INBOX.history."), "%s was written by %q, not by the history service", m.Subject, m.Reply)
	}
	for _, name := range []string{"KV_" + streams.StartKeysBucket, "OBJ_" + streams.CheckpointsBucket} {
		st, err := js.Stream(t.Context(), name)
		require.NoError(t, err)
		info, err := st.Info(t.Context())
		require.NoError(t, err)
		require.NotZero(t, info.State.LastSeq, "%s was written", name)
		for sp.seen[name] < info.State.LastSeq {
			select {
			case m := <-sp.writes:
				check(m)
			case <-time.After(15 * time.Second):
				require.FailNowf(t, "missing writes", "the spy saw %d of %s's %d writes", sp.seen[name], name, info.State.LastSeq)
			}
		}
	}
	for {
		select {
		case m := <-sp.writes:
			check(m)
		default:
			return
		}
	}
}

// The history service is the one writer of FLOW_START_KEYS and FLOW_CHECKPOINTS: with the
// ingress, a worker and the scheduler running beside it, dedup and debounce starts (claims,
// collapses, a release as the delay fires) and runs long enough to be checkpointed (one whose
// steps the worker decides, one whose inputs the ingress appends after reading its checkpoint)
// leave writes to both buckets, every one made by the history service's connection.
func TestOnlyTheHistoryServiceWritesStartKeysAndCheckpoints(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	spy := spyOnWrites(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	h, err := history.New(history.Config{Conn: connectAs(t, srv, "_INBOX.history"), HTTPAddr: "off", Logger: quiet, CheckpointEvery: 4})
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { _ = h.Stop() })
	in, err := ingress.New(ingress.Config{Conn: connectAs(t, srv, "_INBOX.ingress"), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, in.Start(ctx))
	t.Cleanup(func() { _ = in.Stop() })
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "gate", gate)
	flow.RegisterWorkflow(reg, "ticks", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.Signal("stop") != nil {
			return ctx.Complete(ctx.Snapshot().Progress.SignalsReceived), nil
		}
		return ctx.AwaitSignal("stop", "stop"), nil
	})
	flow.RegisterWorkflow(reg, "steps", func(ctx *flow.Context, n int) (flow.Decision, error) {
		v := 0
		for i := range n {
			id := "s" + strconv.Itoa(i)
			out, ok, err := flow.Output[int](ctx, id)
			if err != nil || !ok {
				return ctx.ScheduleStep(id, "inc", v), err
			}
			v = out
		}
		return ctx.Complete(v), nil
	})
	flow.RegisterStep(reg, "inc", func(_ context.Context, n int) (int, error) { return n + 1, nil })
	w, err := worker.New(worker.Config{Conn: connectAs(t, srv, "_INBOX.worker"), Logger: quiet, CheckpointEvery: 4}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	s, err := scheduler.New(scheduler.Config{Conn: connectAs(t, srv, "_INBOX.scheduler"), Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop() })
	client, err := flow.NewClient(ctx, natstest.Connect(t, srv), nil)
	require.NoError(t, err)

	// Dedup: two starts of a key, one run.
	require.Eventually(t, func() bool {
		_, err = client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "dedup-1", DedupKey: "invoice-42", DedupWindow: time.Hour})
		return !errors.Is(err, flow.ErrNoWorker)
	}, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, err)
	id, err := client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "dedup-2", DedupKey: "invoice-42", DedupWindow: time.Hour})
	require.NoError(t, err)
	require.Equal(t, "dedup-1", id)
	// Debounce: three starts, one run, fired by the scheduler; the history service releases
	// the key.
	var first string
	for i := range 3 {
		id, err := client.Start(ctx, "gate", i, &flow.StartOptions{RunID: "save-" + string(rune('a'+i)),
			Debounce: &flow.Debounce{Key: "doc-9", Period: 300 * time.Millisecond}})
		require.NoError(t, err)
		if i == 0 {
			first = id
		}
		require.Equal(t, first, id)
	}
	require.Eventually(t, func() bool {
		s, err := client.Snapshot(ctx, first)
		return err == nil && !s.Delayed
	}, 30*time.Second, 10*time.Millisecond, "the debounced run's delay fires")
	// Long runs: the history service checkpoints them every 4 events. The worker decides each
	// step of one; the ingress reads the other's checkpoint before each input.
	var n int
	_, err = client.Start(ctx, "steps", 8, &flow.StartOptions{RunID: "steps-1"})
	require.NoError(t, err)
	require.NoError(t, client.Result(ctx, "steps-1", &n))
	require.Equal(t, 8, n)
	_, err = client.Start(ctx, "ticks", nil, &flow.StartOptions{RunID: "ticks-1"})
	require.NoError(t, err)
	for i := range 12 {
		_, err := client.Signal(ctx, "ticks-1", "tick", i, nil)
		require.NoError(t, err)
	}
	_, err = client.Signal(ctx, "ticks-1", "stop", nil, nil)
	require.NoError(t, err)
	require.NoError(t, client.Result(ctx, "ticks-1", &n))
	require.Equal(t, 13, n)

	spy.fromHistory(t, srv)
	cps, err := objstore.OpenCheckpoints(ctx, natstest.JetStream(t, srv), streams.CheckpointsBucket)
	require.NoError(t, err)
	cp, err := cps.Info(ctx, "ticks-1")
	require.NoError(t, err)
	require.NotNil(t, cp, "the history service checkpointed the run")
	require.GreaterOrEqual(t, cp.Seq, uint64(12))
}
