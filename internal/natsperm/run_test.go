package natsperm_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natsperm"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// mustRole returns the role named name.
func mustRole(t *testing.T, name string) natsperm.Role {
	t.Helper()
	r, err := natsperm.Get(name)
	require.NoError(t, err)
	return r
}

// as returns the connection settings of role name on srv (whose URL is tls:// when the server
// requires TLS): its user and password, and its inbox prefix. The TLS files come from the
// environment.
func as(t *testing.T, srv *server.Server, name string) natsconn.Config {
	t.Helper()
	r := mustRole(t, name)
	return natsconn.Config{URL: srv.ClientURL(), User: r.User, Password: password(r)}.As(name)
}

// isolate keeps the environment and the nats CLI's configuration of the machine from the
// connections of the test: no NATS variable is set, and no NATS context exists.
func isolate(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	for _, name := range []string{"FLOW_NATS_URL", "FLOW_NATS_USER", "FLOW_NATS_PASSWORD", "FLOW_NATS_CREDS", "FLOW_NATS_NKEY",
		"FLOW_NATS_TOKEN", "FLOW_NATS_CONTEXT", "FLOW_NATS_TLS_CA", "FLOW_NATS_TLS_CERT", "FLOW_NATS_TLS_KEY", "FLOW_NATS_TLS_FIRST",
		"NATS_CA", "NATS_CERT", "NATS_KEY", "NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_CREDS", "NATS_NKEY", "NATS_CONTEXT"} {
		t.Setenv(name, "")
	}
}

// stack is what runAll started, on srv whose refusals v logs: clients connected as flow-client
// and as flow-history (to read what only the history service may), and a connection as
// flow-ingress.
type stack struct {
	srv                     *server.Server
	v                       *violations
	client, ui              *flow.Client
	clientNC, uiNC, ingress *nats.Conn
	history                 *history.Service
	// ahead moves the history service's clock (its sweeper's and payload collector's) on.
	ahead *atomic.Int64
}

// runAll starts the history service, the scheduler, the ingress and a worker running the example
// workflows, each as its own user on srv. The history service starts first: it alone may create
// Flow's streams. It checkpoints runs every 4 events, so that the runs of a test have
// checkpoints, which it alone writes and the others read. Once the services stopped, at the end
// of the test, it fails the test if the server logged a permission violation.
func runAll(t *testing.T, srv *server.Server, v *violations) stack {
	t.Helper()
	t.Cleanup(func() {
		if seen := v.Seen(); len(seen) > 0 {
			t.Errorf("a service or a client was refused a subject its role needs:\n%s", strings.Join(seen, "\n"))
		}
	})
	logger := natstest.Logger()
	ahead := &atomic.Int64{}
	h, err := history.New(history.Config{NATS: as(t, srv, natsperm.History), HTTPAddr: "off", Logger: logger, CheckpointEvery: 4,
		Clock: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { _ = h.Stop() })

	s, err := scheduler.New(scheduler.Config{NATS: as(t, srv, natsperm.Scheduler), Logger: logger})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { _ = s.Stop() })

	in, err := ingress.New(ingress.Config{NATS: as(t, srv, natsperm.Ingress), HTTPAddr: "off", Logger: logger})
	require.NoError(t, err)
	require.NoError(t, in.Start(t.Context()))
	t.Cleanup(func() { _ = in.Stop() })

	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: logger})
	examples.RegisterWith(reg, examples.Options{Logger: logger})
	w, err := worker.New(worker.Config{NATS: as(t, srv, natsperm.Worker), Logger: logger}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	client := func(role string) (*nats.Conn, *flow.Client) {
		nc, err := as(t, srv, role).Dial("flow-test-" + role)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		c, err := flow.NewClient(t.Context(), nc, nil)
		require.NoError(t, err)
		return nc, c
	}
	st := stack{srv: srv, v: v, history: h, ahead: ahead}
	st.clientNC, st.client = client(natsperm.Client)
	st.uiNC, st.ui = client(natsperm.History)
	st.ingress, _ = client(natsperm.Ingress)
	return st
}

// runRoles runs a server that loads deploy/nats/auth.conf (runServer) and every service on it
// (runAll).
func runRoles(t *testing.T) stack {
	t.Helper()
	srv, v := runServer(t, "")
	return runAll(t, srv, v)
}

// exercise completes an order (whose charge is retried on a timer), an approval signalled, a
// webhook delivered to, a reminder woken by its timer, and a parent with its children, as a
// client; it cancels and terminates runs as the web UI does, parks and resumes a run no worker
// serves, and has the ingress dead-letter a malformed input. It fails the test if the server logged a permission violation meanwhile.
func exercise(t *testing.T, st stack, v *violations) {
	t.Helper()
	c := st.client
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	start := func(definition string, input any) string {
		run, err := c.Start(ctx, definition, input, nil)
		require.NoError(t, err, "starting %s", definition)
		return run
	}
	order := start("order", examples.OrderInput{})
	approval := start("approval", examples.ApprovalInput{Who: "bo", Timeout: "1m"})
	webhook := start("webhook", nil)
	reminder := start("reminder", examples.ReminderInput{After: "500ms"})
	parent := start("parent", examples.ParentInput{Sleep: "500ms"})
	cancelled := start("approval", examples.ApprovalInput{Timeout: "1h"})
	terminated := start("reminder", examples.ReminderInput{After: "1h"})
	// A run whose workers are gone, appended as the ingress accepted it: the worker parks it.
	orphan := ingresstest.Accepted(t, st.ingress, "gone", "orphan-1", nil, "")
	var watched []event.Type
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- c.Watch(ctx, order, 0, func(e event.Envelope) error {
			watched = append(watched, e.Type())
			return nil
		})
	}()

	require.Eventually(t, func() bool {
		s, err := c.Snapshot(ctx, approval)
		return err == nil && len(s.SignalWaits) > 0
	}, 30*time.Second, 10*time.Millisecond, "the approval waits for its signal")
	_, err := c.Signal(ctx, approval, examples.ApprovalSignal, map[string]string{"note": "ok"}, nil)
	require.NoError(t, err)

	var token string
	require.Eventually(t, func() bool {
		s, err := c.Snapshot(ctx, webhook)
		if err != nil || s.Hooks[examples.WebhookHook] == nil {
			return false
		}
		token = hookToken(t, ctx, st.uiNC, webhook, examples.WebhookHook)
		return token != ""
	}, 30*time.Second, 10*time.Millisecond, "the webhook creates its hook")
	_, err = c.DeliverHook(ctx, token, map[string]string{"paid": "yes"}, nil)
	require.NoError(t, err)

	// What the web UI's buttons do: the history service forwards them to the ingress's HTTP API
	// with the caller's token; over NATS a client asks the ingress.
	require.Eventually(t, func() bool {
		s, err := c.Snapshot(ctx, cancelled)
		return err == nil && len(s.SignalWaits) > 0
	}, 30*time.Second, 10*time.Millisecond, "the run to cancel waits")
	_, err = c.Cancel(ctx, cancelled, "cancelled in the UI")
	require.NoError(t, err)
	_, err = c.Terminate(ctx, terminated, "terminated in the UI")
	require.NoError(t, err)

	var ord examples.OrderResult
	require.NoError(t, c.Result(ctx, order, &ord))
	require.NotEmpty(t, ord.Reservation)
	var appr examples.ApprovalResult
	require.NoError(t, c.Result(ctx, approval, &appr))
	require.True(t, appr.Approved)
	require.Equal(t, "bo", appr.By)
	var hook examples.WebhookResult
	require.NoError(t, c.Result(ctx, webhook, &hook))
	require.JSONEq(t, `{"paid":"yes"}`, string(hook.Received))
	var sent any
	require.NoError(t, c.Result(ctx, reminder, &sent))
	var children any
	require.NoError(t, c.Result(ctx, parent, &children))

	require.Error(t, c.Result(ctx, cancelled, &appr))
	require.Error(t, c.Result(ctx, terminated, &sent))
	require.NoError(t, <-watchDone)
	require.Equal(t, event.TypeRunCompleted, watched[len(watched)-1])

	s, err := c.Snapshot(ctx, order)
	require.NoError(t, err)
	require.Greater(t, s.Steps["charge-payment"].Attempt, 1, "the charge was retried")
	defs, err := c.Definitions().List(ctx, "")
	require.NoError(t, err)
	require.NotEmpty(t, defs)
	require.Eventually(t, func() bool {
		page, err := c.Runs(ctx, &flow.RunsFilter{Parked: true})
		return err == nil && len(page.Runs) == 1 && page.Runs[0].RunID == orphan
	}, 30*time.Second, 10*time.Millisecond, "the worker parks the run no worker serves")
	_, err = c.Resume(ctx, orphan, nil)
	require.NoError(t, err)

	// A malformed input published without a reply subject: the ingress dead-letters it.
	require.NoError(t, st.clientNC.Publish(api.SignalSubject(approval, "approve"), []byte("{not json")))
	js, err := jetstream.New(st.uiNC)
	require.NoError(t, err)
	dead, err := js.Stream(ctx, streams.DeadLetter)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := dead.Info(ctx)
		return err == nil && info.State.Msgs == 1
	}, 30*time.Second, 10*time.Millisecond, "the ingress dead-letters the rejected input")
	require.Empty(t, v.Seen(), "a service or a client was refused a subject its role needs")
}

// Each service runs as its own user, with exactly its role's permissions as deploy/nats/auth.conf
// grants them, and every kind of run completes without a permission violation.
func TestServicesRunAsTheirRoles(t *testing.T) {
	st := runRoles(t)
	exercise(t, st, st.v)
	collect(t, st, st.v)
}

// collect has the payload collector, as the history role, read the whole history stream and
// delete an object the ingress role offloaded and no event refers to, two hours on by its clock.
func collect(t *testing.T, st stack, v *violations) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	js, err := jetstream.New(st.ingress)
	require.NoError(t, err)
	store, err := objstore.Open(ctx, js, streams.PayloadsBucket, 0)
	require.NoError(t, err)
	orphan, err := store.Put(ctx, []byte(`"an offloaded payload no event refers to"`))
	require.NoError(t, err)
	st.ahead.Store(int64(2 * time.Hour))
	rep, err := st.history.CollectPayloads(ctx)
	require.NoError(t, err)
	require.Contains(t, rep.Deleted, orphan.SHA256)
	require.Empty(t, v.Seen(), "a service or a client was refused a subject its role needs")
}

// The same over TLS, configured as a deployment does: the server requires TLS and a client
// certificate signed by its CA (verify), and every service and the client take the CA, their
// certificate and key from FLOW_NATS_TLS_CA, FLOW_NATS_TLS_CERT and FLOW_NATS_TLS_KEY, and
// authenticate as their users.
func TestServicesRunAsTheirRolesOverTLS(t *testing.T) {
	files := natstest.GenerateTLS(t, t.TempDir())
	srv, v := runServer(t, fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: true\n}\n",
		files.ServerCert, files.ServerKey, files.CA))
	client := mustRole(t, natsperm.Client)
	_, err := nats.Connect(srv.ClientURL(), nats.UserInfo(client.User, password(client)))
	require.ErrorContains(t, err, "certificate", "a client that does not trust the server's CA cannot connect")
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(client.User, password(client)), nats.RootCAs(files.CA))
	if err == nil {
		nc.Close()
		t.Fatal("a client without a certificate connected to a server that verifies them")
	}
	t.Setenv("FLOW_NATS_TLS_CA", files.CA)
	t.Setenv("FLOW_NATS_TLS_CERT", files.ClientCert)
	t.Setenv("FLOW_NATS_TLS_KEY", files.ClientKey)
	exercise(t, runAll(t, srv, v), v)
}
