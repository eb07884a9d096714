package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/worker"
)

// bucketSpy receives every publish to a bucket's subjects: each write, with the reply inbox of
// the connection that made it.
type bucketSpy struct {
	bucket string
	// writer names the bucket's one writer, for the failures' messages.
	writer string
	writes chan *nats.Msg
	seen   uint64
}

func spyOn(t *testing.T, srv *natsserver.Server, bucket, writer string) *bucketSpy {
	t.Helper()
	nc := natstest.Connect(t, srv)
	sp := &bucketSpy{bucket: bucket, writer: writer, writes: make(chan *nats.Msg, 4096)}
	sub, err := nc.ChanSubscribe("$KV."+bucket+".>", sp.writes)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	return sp
}

// from checks the writes to the bucket so far: the spy receives as many as the bucket stored
// (its last sequence), and any it refused (a create that found the key, a write at a stale
// revision, a compare-and-set that lost), each made by a connection whose inbox prefix is prefix.
func (sp *bucketSpy) from(t *testing.T, srv *natsserver.Server, prefix string) {
	t.Helper()
	stream, err := natstest.JetStream(t, srv).Stream(t.Context(), "KV_"+sp.bucket)
	require.NoError(t, err)
	info, err := stream.Info(t.Context())
	require.NoError(t, err)
	require.NotZero(t, info.State.LastSeq, "%s was written", sp.bucket)
	check := func(m *nats.Msg) {
		sp.seen++
		require.True(t, strings.HasPrefix(m.Reply, prefix), "%s was written by %q, not by %s", m.Subject, m.Reply, sp.writer)
	}
	for sp.seen < info.State.LastSeq {
		select {
		case m := <-sp.writes:
			check(m)
		case <-time.After(15 * time.Second):
			require.FailNowf(t, "missing writes", "the spy saw %d of %s's %d writes", sp.seen, sp.bucket, info.State.LastSeq)
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

// hookedRegistry registers "hooked": it creates hook "cb" and completes with what the hook
// received; a signal it receives meanwhile changes nothing (a reset point with the hook pending).
func hookedRegistry() *flow.Registry {
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "hooked", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if h := ctx.Hook("cb"); h != nil {
			return ctx.Complete(h), nil
		}
		return ctx.CreateHook("cb", nil), nil
	})
	return reg
}

// hookToken waits for run runID's hook "cb" and returns its token.
func hookToken(t *testing.T, ctx context.Context, c *flow.Client, runID string) string {
	t.Helper()
	var token string
	require.Eventually(t, func() bool {
		s, err := c.Secrets().Snapshot(ctx, runID)
		if err != nil || s.Hooks["cb"] == nil {
			return false
		}
		token = s.Hooks["cb"].Token
		return true
	}, 30*time.Second, 10*time.Millisecond, "run %s creates its hook", runID)
	return token
}

// FLOW_HOOKS and FLOW_PARKED have one writer, the history service: a worker asks it to claim
// the token of each hook its runs create and to park the runs it cannot drive, and the ingress
// that resets a run waiting on a hook moves no route. Every write to either bucket comes from
// the history service's connection.
func TestWorkerNeverWritesHooksOrParked(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	hooks, parked := spyOn(t, srv, streams.HooksBucket, "the history service"), spyOn(t, srv, streams.ParkedBucket, "the history service")
	h, err := history.New(history.Config{Conn: connectAs(t, srv, "_INBOX.history"), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	ingresstest.Start(t, ingress.Config{Conn: connectAs(t, srv, "_INBOX.ingress"), Logger: quiet})
	w, err := worker.New(worker.Config{Conn: connectAs(t, srv, "_INBOX.worker"), Logger: quiet}, hookedRegistry())
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	c := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	// A hook created, delivered to, and its run ended: claimed, then released.
	_, err = c.Start(ctx, "hooked", nil, &flow.StartOptions{RunID: "hk-1"})
	require.NoError(t, err)
	_, err = c.DeliverHook(ctx, hookToken(t, ctx, c, "hk-1"), map[string]string{"paid": "yes"}, nil)
	require.NoError(t, err)
	var out map[string]string
	require.NoError(t, c.Result(ctx, "hk-1", &out))
	require.Equal(t, "yes", out["paid"])

	// A reset that copies the pending hook: the token moves to the new run.
	_, err = c.Start(ctx, "hooked", nil, &flow.StartOptions{RunID: "hk-2"})
	require.NoError(t, err)
	token := hookToken(t, ctx, c, "hk-2")
	_, err = c.Signal(ctx, "hk-2", "nudge", nil, nil)
	require.NoError(t, err)
	reset, err := c.Reset(ctx, "hk-2", &flow.ResetOptions{Seq: 3})
	require.NoError(t, err)
	to, err := c.DeliverHook(ctx, token, map[string]string{"paid": "later"}, nil)
	require.NoError(t, err)
	require.Equal(t, reset.NewRunID, to)
	require.NoError(t, c.Result(ctx, reset.NewRunID, &out))
	require.Equal(t, "later", out["paid"])

	// A run of a definition no worker serves: parked.
	orphan := ingresstest.Accepted(t, natstest.Connect(t, srv), "gone", "gone-1", nil, "")
	kv, err := natstest.JetStream(t, srv).KeyValue(ctx, streams.ParkedBucket)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := kv.Get(ctx, orphan); return err == nil }, 30*time.Second, 10*time.Millisecond,
		"the worker has the run parked")

	hooks.from(t, srv, "_INBOX.history.")
	parked.from(t, srv, "_INBOX.history.")
}

// logSink keeps what a logger wrote, for a test to wait for a line.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) contains(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(s.buf.String(), sub)
}

// With no history service, a decision that creates a hook cannot claim its token: it fails
// with an error that says so, commits nothing, and its task comes back; once the history
// service runs, the claim succeeds and the run goes on. A run the worker cannot drive is not
// parked meanwhile (its task comes back too), and is parked once the history service answers.
func TestHookClaimWaitsForTheHistoryService(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	require.NoError(t, streams.Ensure(t.Context(), natstest.JetStream(t, srv), streams.Config{}))
	logs := &logSink{}
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: slog.New(slog.NewTextHandler(logs, nil))}, hookedRegistry())
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	runID := ingresstest.Accepted(t, natstest.Connect(t, srv), "hooked", "hk-wait", nil, "")
	orphan := ingresstest.Accepted(t, natstest.Connect(t, srv), "gone", "gone-wait", nil, "")
	require.Eventually(t, func() bool {
		return logs.contains("no history service answers "+api.SubjectHookClaim) && logs.contains("no history service answers "+api.SubjectPark)
	}, 30*time.Second, 10*time.Millisecond, "the claim and the park fail for want of the history service")
	st, err := jsstore.New(ctx, natstest.JetStream(t, srv), nil)
	require.NoError(t, err)
	hist, err := st.Load(ctx, runID, 0)
	require.NoError(t, err)
	require.Len(t, hist, 1, "no hook.created without its token's route: %v", types(hist))
	kv, err := natstest.JetStream(t, srv).KeyValue(ctx, streams.ParkedBucket)
	require.NoError(t, err)
	_, err = kv.Get(ctx, orphan)
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)

	startHistoryAndIngress(t, srv)
	c := newClient(t, srv)
	_, err = c.DeliverHook(ctx, hookToken(t, ctx, c, runID), "ok", nil)
	require.NoError(t, err)
	var out string
	require.NoError(t, c.Result(ctx, runID, &out))
	require.Equal(t, "ok", out)
	require.Eventually(t, func() bool { _, err := kv.Get(ctx, orphan); return err == nil }, 30*time.Second, 10*time.Millisecond,
		"the run is parked once the history service answers")
	hist, err = st.Load(ctx, runID, 0)
	require.NoError(t, err)
	require.Equal(t, event.TypeRunCompleted, hist[len(hist)-1].Type())
}
