package natsperm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/cli"
	"github.com/flowrun/flow/internal/natsperm"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
)

// failFast bounds how long a call the server refused for lack of permission may take: the
// refusal comes back within a round trip, so this is slack for a loaded machine, far below the
// 10 s of a request's timeout.
const failFast = 5 * time.Second

// startFront starts the history service and the ingress, each as its own role, so that every
// request a client makes has a responder: a call that fails, fails for its own user's lack of
// permission.
func startFront(t *testing.T, srv *server.Server) {
	t.Helper()
	h, err := history.New(history.Config{NATS: as(t, srv, natsperm.History), HTTPAddr: "off", Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { _ = h.Stop() })
	in, err := ingress.New(ingress.Config{NATS: as(t, srv, natsperm.Ingress), HTTPAddr: "off", Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, in.Start(t.Context()))
	t.Cleanup(func() { _ = in.Stop() })
}

// requireRefused checks that err is the client's refusal of publishing to subject: at once
// (took), typed, and saying what to do.
func requireRefused(t *testing.T, err error, took time.Duration, subject string) {
	t.Helper()
	require.Error(t, err)
	require.Less(t, took, failFast, "the refused call took %s: %v", took, err)
	require.ErrorIs(t, err, flow.ErrPermissionDenied)
	require.ErrorIs(t, err, nats.ErrPermissionViolation)
	var pe *flow.PermissionError
	require.True(t, errors.As(err, &pe), "%T: %v", err, err)
	require.Equal(t, "flow-worker", pe.User)
	// The first refusal is the subscription to the reply inbox (a worker may subscribe to its
	// own, _INBOX.worker.>, only), or the request's subject.
	if pe.Op == flow.PermissionSubscribe {
		require.Regexp(t, `^_INBOX\.[^.]+\.\*$`, pe.Subject)
		require.ErrorContains(t, err, fmt.Sprintf("NATS user %q may not subscribe to %q", "flow-worker", pe.Subject))
	} else {
		require.Equal(t, flow.PermissionPublish, pe.Op)
		require.Equal(t, subject, pe.Subject)
		require.ErrorContains(t, err, fmt.Sprintf("NATS user %q may not publish to %q", "flow-worker", subject))
	}
	require.ErrorContains(t, err, "connect with the client role's credentials (user flow-client")
	require.ErrorContains(t, err, "docs/operations.md")
}

// A program that connects with a service's credentials (here a worker's) instead of the client
// role's is refused every request subject of the client: each call of the Go client fails at
// once with a *flow.PermissionError naming the subject and what to do, instead of retrying the
// refused request until its context ends (Start, Signal: forever; Runs: 30 s).
func TestClientWithAServiceRoleFailsFast(t *testing.T) {
	srv, _ := runServer(t, "")
	startFront(t, srv)
	nc, err := as(t, srv, natsperm.Worker).Dial("wrong-role", nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	require.NoError(t, err)
	t.Cleanup(nc.Close) // after the parallel subtests
	c, err := flow.NewClient(t.Context(), nc, nil)
	require.NoError(t, err)

	calls := []struct {
		name, subject string
		call          func(ctx context.Context) error
	}{
		{"Start", api.StartSubject("order"), func(ctx context.Context) error { _, err := c.Start(ctx, "order", nil, nil); return err }},
		{"Signal", api.SignalSubject("r1", "approve"), func(ctx context.Context) error {
			_, err := c.Signal(ctx, "r1", "approve", nil, nil)
			return err
		}},
		{"Cancel", api.CancelSubject("r1"), func(ctx context.Context) error { _, err := c.Cancel(ctx, "r1", "x"); return err }},
		{"Runs", api.SubjectList, func(ctx context.Context) error { _, err := c.Runs(ctx, nil); return err }},
		{"Snapshot", api.SubjectGet, func(ctx context.Context) error { _, err := c.Snapshot(ctx, "r1"); return err }},
		{"Result", api.SubjectAwait, func(ctx context.Context) error { return c.Result(ctx, "r1", nil) }},
		{"ListSchedules", api.ScheduleSubject(api.ScheduleOpList), func(ctx context.Context) error {
			_, err := c.Schedules().List(ctx)
			return err
		}},
		{"Batches", api.SubjectBatchList, func(ctx context.Context) error {
			_, err := c.Batches().List(ctx, &flow.BatchListOptions{Limit: 10})
			return err
		}},
		{"Pauses", api.SubjectPausesList, func(ctx context.Context) error { _, err := c.Pauses().List(ctx); return err }},
		{"Reset", api.ResetSubject("r1"), func(ctx context.Context) error {
			_, err := c.Reset(ctx, "r1", &flow.ResetOptions{Seq: 1})
			return err
		}},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The deadline lets the code before the fix show its retries, and fail.
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
			defer cancel()
			began := time.Now()
			err := tc.call(ctx)
			requireRefused(t, err, time.Since(began), tc.subject)
		})
	}
}

// The flow command run with a worker's credentials stops at once with the client's error,
// printed once, instead of printing nats.go's raw violation every 10 s until interrupted
// (start, signal) or failing after 30 s (runs).
func TestCommandsWithAServiceRoleFailFast(t *testing.T) {
	srv, _ := runServer(t, "")
	startFront(t, srv)
	worker := mustRole(t, natsperm.Worker)
	conn := []string{"--server", srv.ClientURL(), "--user", worker.User, "--password", password(worker)}
	for _, args := range [][]string{{"start", "order"}, {"signal", "r1", "approve"}, {"runs"}} {
		t.Run(args[0], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			began := time.Now()
			code := cli.Main(ctx, append(args, conn...), &out, &errOut)
			took := time.Since(began)
			require.Equal(t, 1, code, errOut.String())
			require.Less(t, took, failFast, "flow %s took %s: %s", args[0], took, errOut.String())
			// The command dials with the client's inbox prefix, to which the worker's user may
			// not subscribe: that refusal comes first.
			want := fmt.Sprintf("flow: permission denied: NATS user %q may not subscribe to \"%s.", worker.User, flow.ClientInboxPrefix)
			require.Contains(t, errOut.String(), want)
			require.Contains(t, errOut.String(), "connect with the client role's credentials (user flow-client")
			require.Contains(t, errOut.String(), "docs/operations.md")
			require.Equal(t, 1, bytes.Count(errOut.Bytes(), []byte("\n")), "one line of error, no raw violation: %s", errOut.String())
		})
	}
}

// A user who may publish the client's requests but not subscribe to its reply inbox: the first
// call fails at once naming the inbox, and so do the calls after it, until a reconnect
// subscribes again.
func TestClientWithoutItsInboxFailsFast(t *testing.T) {
	srv := natstest.RunServer(t, &server.Options{Users: []*server.User{
		{Username: "no-inbox", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"flow.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"flow.events.>"}},
		}},
	}})
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("no-inbox", "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	require.NoError(t, err)
	defer nc.Close()
	c, err := flow.NewClient(t.Context(), nc, nil)
	require.NoError(t, err)
	for range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		began := time.Now()
		_, err := c.Runs(ctx, nil)
		took := time.Since(began)
		cancel()
		require.Less(t, took, failFast, "the refused call took %s: %v", took, err)
		require.ErrorIs(t, err, flow.ErrPermissionDenied)
		var pe *flow.PermissionError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, flow.PermissionSubscribe, pe.Op)
		require.Regexp(t, `^_INBOX\.[^.]+\.\*$`, pe.Subject)
		require.ErrorContains(t, err, `NATS user "no-inbox" may not subscribe to "_INBOX.`)
	}
}
