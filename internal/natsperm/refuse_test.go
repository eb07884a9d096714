package natsperm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natsperm"
)

// Each role is refused writes it must not make: the server answers a permissions violation (and
// logs it), and nothing reaches a subscriber of the subject.
func TestRolesAreRefusedWhatTheyDoNotNeed(t *testing.T) {
	srv, v := runServer(t, "")
	refused := map[string][]string{
		// Only the services write histories and tasks; a client goes through the ingress.
		// Nor does it reach the scheduler's doors, which take only what the ingress checked.
		natsperm.Client: {"flow.history.r1", "flow.task.default.r1", "flow.events.order.r1.run.completed",
			"$KV.FLOW_RUNS.r1", "$JS.API.STREAM.INFO.FLOW_HISTORY", "$JS.API.DIRECT.GET.FLOW_HISTORY",
			"flow.scheduler.schedules.create", "flow.scheduler.batches.create"},
		// A worker takes no inputs on others' behalf and does not speak for the history service.
		natsperm.Worker: {"flow.ingress.signal.r1.approve", "flow.events.order.r1.run.completed", "flow.api.runs.get",
			"$KV.FLOW_RUNS.r1", "$KV.FLOW_LEASES.scheduler", "$JS.API.STREAM.UPDATE.FLOW_HISTORY",
			"$JS.API.STREAM.DELETE.FLOW_HISTORY", "$JS.API.STREAM.PURGE.FLOW_TASKS"},
		// The scheduler reads the workers' heartbeat entries, never writes them.
		natsperm.Scheduler: {"flow.ingress.start.order", "flow.events.order.r1.run.completed", "$KV.FLOW_RUNS.r1",
			"$JS.API.STREAM.CREATE.FLOW_HISTORY", "$JS.API.STREAM.DELETE.KV_FLOW_TIMERS", "$KV.FLOW_HEARTBEATS.r1.s"},
		// The ingress reads schedules and batch jobs; the scheduler alone writes them.
		natsperm.Ingress: {"flow.events.order.r1.run.completed", "$KV.FLOW_RUNS.r1", "$KV.FLOW_LEASES.scheduler",
			"$JS.API.STREAM.UPDATE.FLOW_HISTORY", "$JS.API.STREAM.PURGE.OBJ_FLOW_PAYLOADS", "$KV.FLOW_SCHEDULES.nightly", "$KV.FLOW_BATCHES.job.b1"},
		// Even the provisioner cannot delete a stream, nor purge one but FLOW_HISTORY (the
		// retention sweeper purges one run's subject at a time, docs/retention.md).
		natsperm.History: {"$JS.API.STREAM.DELETE.FLOW_HISTORY", "$JS.API.STREAM.PURGE.FLOW_TASKS",
			"$JS.API.STREAM.DELETE.KV_FLOW_RUNS", "$KV.FLOW_LEASES.scheduler", "$JS.API.STREAM.PURGE.KV_FLOW_HOOKS"},
	}
	// A connection with every right watches the subjects: a refused publish must not reach it.
	admin, err := nats.Connect(srv.ClientURL(), nats.UserInfo("admin", "admin"))
	if err == nil {
		admin.Close()
		t.Fatal("the server accepts a user that auth.conf does not define")
	}
	for name, subjects := range refused {
		t.Run(name, func(t *testing.T) {
			errs := make(chan error, len(subjects))
			cfg := as(t, srv, name)
			nc, err := cfg.Dial("probe-"+name, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
			require.NoError(t, err)
			defer nc.Close()
			for _, subject := range subjects {
				require.NoError(t, nc.Publish(subject, []byte("{}")))
				require.NoError(t, nc.Flush())
				select {
				case err := <-errs:
					require.ErrorIs(t, err, nats.ErrPermissionViolation)
					require.ErrorContains(t, err, subject)
				case <-time.After(10 * time.Second):
					t.Fatalf("%s may publish to %s", cfg.User, subject)
				}
			}
			logged := func() int {
				n := 0
				for _, line := range v.Seen() {
					if strings.Contains(line, "probe-"+name+`"`) {
						n++
					}
				}
				return n
			}
			require.Eventually(t, func() bool { return logged() == len(subjects) }, 10*time.Second, time.Millisecond,
				"the server logs each refusal: %v", v.Seen())
		})
	}
	// A client may not eavesdrop on the histories either.
	nc, err := as(t, srv, natsperm.Client).Dial("probe-client-sub", nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
		nats.PermissionErrOnSubscribe(true))
	require.NoError(t, err)
	defer nc.Close()
	sub, err := nc.SubscribeSync("flow.history.>")
	require.NoError(t, err)
	_, err = sub.NextMsg(5 * time.Second)
	require.ErrorIs(t, err, nats.ErrPermissionViolation)
}
