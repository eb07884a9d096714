package ingress_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/worker"
)

// clientPermissions are the NATS permissions docs/operations.md gives the client role: it
// publishes only to the ingress and the queries, and subscribes only to its replies and the event
// feed.
var clientPermissions = &server.Permissions{
	Publish:   &server.SubjectPermission{Allow: []string{"flow.ingress.>", "flow.api.>"}},
	Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "flow.events.>"}},
}

// A client with only the client role's permissions starts, signals, delivers to hooks, cancels,
// waits for results, watches and reads runs; it cannot write to a run's history.
func TestClientNeedsOnlyIngressAndQuerySubjects(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t, &server.Options{JetStream: true, Users: []*server.User{
		{Username: "svc", Password: "svc"},
		{Username: "client", Password: "client", Permissions: clientPermissions},
	}})
	svc := func() *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("svc", "svc"))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	h, err := history.New(history.Config{Conn: svc(), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { _ = h.Stop() })
	in, err := ingress.New(ingress.Config{Conn: svc(), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, in.Start(t.Context()))
	t.Cleanup(func() { _ = in.Stop() })
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "gate", gate)
	w, err := worker.New(worker.Config{Conn: svc(), Logger: quiet}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	violations := make(chan error, 16)
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("client", "client"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c, err := flow.NewClient(t.Context(), nc, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	run, err := c.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "p1"})
	require.NoError(t, err)
	var events []event.Type
	watched := make(chan error, 1)
	go func() {
		watched <- c.Watch(ctx, run, 0, func(e event.Envelope) error {
			events = append(events, e.Type())
			return nil
		})
	}()
	require.Eventually(t, func() bool {
		s, err := c.Snapshot(ctx, run)
		return err == nil && s.SignalWaits["go"] != nil
	}, 20*time.Second, 5*time.Millisecond)
	_, err = c.Signal(ctx, run, "go", "by the client", nil)
	require.NoError(t, err)
	var out string
	require.NoError(t, c.Result(ctx, run, &out))
	require.Equal(t, "by the client", out)
	require.NoError(t, <-watched)
	require.Equal(t, event.TypeRunCompleted, events[len(events)-1])

	run2, err := c.Start(ctx, "gate", nil, nil)
	require.NoError(t, err)
	// The client role reads hook tokens redacted; an operator's connection reads them.
	admin, err := flow.NewClient(t.Context(), svc(), nil)
	require.NoError(t, err)
	var tok string
	require.Eventually(t, func() bool {
		s, err := admin.Secrets().Snapshot(ctx, run2)
		if err != nil || s.Hooks["cb"] == nil {
			return false
		}
		tok = s.Hooks["cb"].Token
		return true
	}, 20*time.Second, 5*time.Millisecond)
	s, err := c.Snapshot(ctx, run2)
	require.NoError(t, err)
	require.Equal(t, "redacted:cb", s.Hooks["cb"].Token)
	_, err = c.DeliverHook(ctx, tok, "hooked", nil)
	require.NoError(t, err)
	require.NoError(t, c.Result(ctx, run2, &out))
	require.Equal(t, "hooked", out)
	require.Eventually(t, func() bool { // the runs index follows the stream
		page, err := c.Runs(ctx, nil)
		return err == nil && len(page.Runs) == 2
	}, 20*time.Second, 5*time.Millisecond)
	select {
	case err := <-violations:
		t.Fatalf("the client needed a permission it does not have: %v", err)
	default:
	}

	// It cannot append to a history itself.
	js, err := jetstream.New(svc())
	require.NoError(t, err)
	st, err := js.Stream(ctx, streams.History)
	require.NoError(t, err)
	before, err := st.Info(ctx)
	require.NoError(t, err)
	require.NoError(t, nc.Publish(streams.Layout{}.Subject("p1"), []byte("[]")))
	require.NoError(t, nc.Flush())
	select {
	case err := <-violations:
		require.ErrorContains(t, err, "Permissions Violation")
	case <-ctx.Done():
		t.Fatal("publishing to a history subject was not refused")
	}
	after, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, before.State.LastSeq, after.State.LastSeq)
}
