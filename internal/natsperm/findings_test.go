package natsperm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natsperm"
	"github.com/flowrun/flow/internal/payload/objstore"
)

// refused publishes subject (with data and headers h) as nc and reports whether the server
// refused it: the refusal comes back before the answer to the flush. nc must have been refused
// nothing before (its last error would stay).
func refused(t *testing.T, nc *nats.Conn, subject string, h nats.Header, data []byte) bool {
	t.Helper()
	require.NoError(t, nc.LastError())
	require.NoError(t, nc.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: data}))
	require.NoError(t, nc.Flush())
	err := nc.LastError()
	return err != nil && errors.Is(err, nats.ErrPermissionViolation)
}

// dial connects as role with its inbox prefix, on a connection of its own.
func dial(t *testing.T, srv interface{ ClientURL() string }, role string) *nats.Conn {
	t.Helper()
	r := mustRole(t, role)
	nc, err := natsconn.Config{URL: srv.ClientURL(), User: r.User, Password: password(r)}.As(role).Dial("probe-"+role,
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// A worker once purged OBJ_FLOW_PAYLOADS (an offloaded payload was then gone),
// and the scheduler and the ingress could purge streams too. Now a worker's, the ingress's and
// the scheduler's purge of any stream is refused and the payload stays; the history service
// purges FLOW_HISTORY only as retention does (one run's subject; nats-server cannot limit a
// purge to a subject, so this one stays the history role's documented power) and the object
// stores it owns, and no other stream.
func TestOnlyTheHistoryServicePurges(t *testing.T) {
	srv, _ := runServer(t, "")
	provision(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	worker := dial(t, srv, natsperm.Worker)
	wjs, err := jetstream.New(worker)
	require.NoError(t, err)
	store, err := objstore.Open(ctx, wjs, streams.PayloadsBucket, 0)
	require.NoError(t, err)
	ref, err := store.Put(ctx, []byte(`"an offloaded signal"`))
	require.NoError(t, err)

	for _, role := range []string{natsperm.Worker, natsperm.Ingress, natsperm.Scheduler, natsperm.Client} {
		for _, s := range natsperm.AllStreams {
			require.True(t, refused(t, dial(t, srv, role), "$JS.API.STREAM.PURGE."+s, nil, []byte(`{}`)), "%s may purge %s", role, s)
		}
	}
	for _, s := range natsperm.AllStreams {
		owns := s == streams.History || s == "OBJ_"+streams.ArchiveBucket || s == "OBJ_"+streams.PayloadsBucket || s == "OBJ_"+streams.CheckpointsBucket
		if !owns {
			require.True(t, refused(t, dial(t, srv, natsperm.History), "$JS.API.STREAM.PURGE."+s, nil, []byte(`{}`)), "history may purge %s", s)
		}
	}
	got, err := store.Get(ctx, ref)
	require.NoError(t, err, "the payload is still there")
	require.JSONEq(t, `"an offloaded signal"`, string(got))
}

// The client role once subscribed to _INBOX.> and captured the replies of every
// role (history events, tasks, KV entries, a hook token) while a run started and was signalled.
// Now each role subscribes to its own inbox prefix only: the client's subscriptions to every
// inbox, and to each other role's, are refused, while its own calls (a run started, signalled,
// awaited) work.
func TestClientReadsOnlyItsOwnReplies(t *testing.T) {
	st := runRoles(t)
	srv, v := st.srv, st.v
	spy := mustRole(t, natsperm.Client)
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(spy.User, password(spy)), nats.PermissionErrOnSubscribe(true),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	require.NoError(t, err)
	defer nc.Close()
	var subs []*nats.Subscription
	for _, subject := range []string{"_INBOX.>", "_INBOX.*.*", natsconn.InboxPrefix(natsperm.History) + ".>",
		natsconn.InboxPrefix(natsperm.Scheduler) + ".>", natsconn.InboxPrefix(natsperm.Ingress) + ".>", natsconn.InboxPrefix(natsperm.Worker) + ".>"} {
		sub, err := nc.SubscribeSync(subject)
		require.NoError(t, err)
		subs = append(subs, sub)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var run string
	require.Eventually(t, func() bool {
		run, err = st.client.Start(ctx, "approval", examples.ApprovalInput{Who: "bo", Timeout: "1m"}, nil)
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the worker registers its definitions")
	require.Eventually(t, func() bool {
		s, err := st.client.Snapshot(ctx, run)
		return err == nil && len(s.SignalWaits) > 0
	}, 30*time.Second, 10*time.Millisecond)
	_, err = st.client.Signal(ctx, run, examples.ApprovalSignal, map[string]string{"note": "ok"}, nil)
	require.NoError(t, err)
	var out examples.ApprovalResult
	require.NoError(t, st.client.Result(ctx, run, &out))
	for _, sub := range subs {
		_, err := sub.NextMsg(5 * time.Second)
		require.ErrorIs(t, err, nats.ErrPermissionViolation, "the client subscribed to %s", sub.Subject)
	}
	// nats-server logged the spy's refusals; the services were refused nothing.
	for _, line := range v.Seen() {
		require.Contains(t, line, spy.User, "a service was refused a subject: %s", line)
	}
	v.mu.Lock()
	v.lines = nil
	v.mu.Unlock()
}

// The hook's KV entry: a role that may answer requests (nats-server's
// allow_responses) could publish once to the reply subject of any message it received, and the
// worker receives its own publishes to flow.history.>: it published one with the reply subject
// $KV.FLOW_HOOKS.<token> and then a deletion to it. No role has allow_responses now: the
// deletion is refused and the hook's route is not deleted. (JetStream itself still sends its
// acknowledgement of the forged message, which FLOW_HISTORY stored, to that reply subject,
// overwriting the entry: nats-server checks no reply subject against permissions; see
// docs/operations.md, "What the permissions cannot stop".)
func TestWorkerCannotDeleteThroughAReply(t *testing.T) {
	srv, _ := runServer(t, "")
	provision(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	hjs, err := jetstream.New(dial(t, srv, natsperm.History))
	require.NoError(t, err)
	hooks, err := hjs.KeyValue(ctx, streams.HooksBucket)
	require.NoError(t, err)
	_, err = hooks.Put(ctx, "tok1", []byte(`{"run_id":"r1","hook_id":"paid"}`))
	require.NoError(t, err)

	worker := dial(t, srv, natsperm.Worker)
	echo, err := worker.SubscribeSync("flow.history.>")
	require.NoError(t, err)
	require.NoError(t, worker.Flush())
	// A core publish, no JetStream: the message comes back to the worker with its reply.
	require.NoError(t, worker.PublishMsg(&nats.Msg{Subject: "flow.history.forged", Reply: "$KV." + streams.HooksBucket + ".tok1"}))
	m, err := echo.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.True(t, refused(t, worker, m.Reply, nats.Header{"KV-Operation": []string{"DEL"}}, nil),
		"the worker deleted a hook's route through the reply subject of its own message")
	e, err := hooks.Get(ctx, "tok1")
	require.NoError(t, err, "the route is still there")
	require.Equal(t, jetstream.KeyValuePut, e.Operation())
}
