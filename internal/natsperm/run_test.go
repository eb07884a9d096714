package natsperm_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natsperm"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

func mustRole(t *testing.T, name string) natsperm.Role {
	t.Helper()
	r, err := natsperm.Get(name)
	require.NoError(t, err)
	return r
}

// as returns the connection settings of role name on srv (whose URL is tls:// when the server
// requires TLS): its user and password, and tls.
func as(t *testing.T, srv *server.Server, name string, tls natsconn.TLS) natsconn.Config {
	t.Helper()
	r := mustRole(t, name)
	return natsconn.Config{URL: srv.ClientURL(), User: r.User, Password: password(r), TLS: tls}
}

// isolate keeps the environment and the nats CLI's configuration of the machine from the
// connections of the test.
func isolate(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	for _, name := range []string{"FLOW_NATS_URL", "FLOW_NATS_USER", "FLOW_NATS_PASSWORD", "FLOW_NATS_CREDS", "FLOW_NATS_NKEY",
		"FLOW_NATS_TOKEN", "FLOW_NATS_CONTEXT", "NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_CREDS", "NATS_NKEY", "NATS_CONTEXT"} {
		t.Setenv(name, "")
	}
}

// runAll starts the history service, the scheduler, the ingress and a worker running the example
// workflows, each as its own user on srv, and returns a client connected as flow-client. The
// history service starts first: it alone may create Flow's streams.
func runAll(t *testing.T, srv *server.Server, tls natsconn.TLS) *flow.Client {
	t.Helper()
	logger := natstest.Logger()
	h, err := history.New(history.Config{NATS: as(t, srv, natsperm.History, tls), HTTPAddr: "off", Logger: logger})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { _ = h.Stop() })

	s, err := scheduler.New(scheduler.Config{NATS: as(t, srv, natsperm.Scheduler, tls), Logger: logger})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { _ = s.Stop() })

	in, err := ingress.New(ingress.Config{NATS: as(t, srv, natsperm.Ingress, tls), HTTPAddr: "off", Logger: logger})
	require.NoError(t, err)
	require.NoError(t, in.Start(t.Context()))
	t.Cleanup(func() { _ = in.Stop() })

	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: logger})
	examples.RegisterWith(reg, examples.Options{Logger: logger})
	w, err := worker.New(worker.Config{NATS: as(t, srv, natsperm.Worker, tls), Logger: logger}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	nc, err := as(t, srv, natsperm.Client, tls).Dial("flow-test-client")
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c, err := flow.NewClient(t.Context(), nc, nil)
	require.NoError(t, err)
	return c
}

// exercise completes an order (whose charge is retried on a timer), an approval signalled, a
// webhook delivered to, a reminder woken by its timer, and a parent with its children, as a
// client. It fails the test if the server logged a permission violation meanwhile.
func exercise(t *testing.T, c *flow.Client, v *violations) {
	t.Helper()
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
		token = s.Hooks[examples.WebhookHook].Token
		return true
	}, 30*time.Second, 10*time.Millisecond, "the webhook creates its hook")
	_, err = c.DeliverHook(ctx, token, map[string]string{"paid": "yes"}, nil)
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

	s, err := c.Snapshot(ctx, order)
	require.NoError(t, err)
	require.Greater(t, s.Steps["charge-payment"].Attempt, 1, "the charge was retried")
	page, err := c.Runs(ctx, nil)
	require.NoError(t, err)
	require.NotEmpty(t, page.Runs)
	require.Empty(t, v.Seen(), "a service or the client was refused a subject its role needs")
}

// Each service runs as its own user, with exactly its role's permissions as deploy/nats/auth.conf
// grants them, and every kind of run completes without a permission violation.
func TestServicesRunAsTheirRoles(t *testing.T) {
	isolate(t)
	srv, v := runServer(t, "")
	exercise(t, runAll(t, srv, natsconn.TLS{}), v)
}

// The same over TLS: the server requires TLS of every client, the services trust its CA
// (FLOW_NATS_TLS_CA) and authenticate as their users.
func TestServicesRunAsTheirRolesOverTLS(t *testing.T) {
	isolate(t)
	files := natstest.GenerateTLS(t, t.TempDir())
	srv, v := runServer(t, "tls {\n  cert_file: \""+files.ServerCert+"\"\n  key_file: \""+files.ServerKey+"\"\n  ca_file: \""+files.CA+"\"\n}\n")
	_, err := nats.Connect(srv.ClientURL(), nats.UserInfo("flow-client", password(mustRole(t, natsperm.Client))))
	require.ErrorContains(t, err, "certificate", "TLS is required, and only a client trusting the server's CA connects")
	exercise(t, runAll(t, srv, natsconn.TLS{CA: files.CA}), v)
}
