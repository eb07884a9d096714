package crashtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// TestProcessKilledBetweenWrites kills, with SIGKILL, the one process of a role (worker,
// scheduler or history service) while the workload runs, on one server and on a 3-server
// cluster with Flow's streams at three replicas: at a fault point between two of its
// writes (the process kills itself there, FLOW_FAULTS), or, for the history service, at no
// chosen point, once some runs completed. A fresh process of the role then starts; every run
// completes, every history passes the invariants checker and the runs index equals a fresh
// projection of history.
func TestProcessKilledBetweenWrites(t *testing.T) {
	t.Parallel()
	const copies = 3 // of each of the 8 workload runs
	for _, tt := range []struct {
		name, role, faults string
		// killAfter, when set, makes the parent kill the child once that many runs completed.
		killAfter int
	}{
		{name: "WorkerAfterAppendBeforeTask", role: roleWorker, faults: "after-append-before-task:kill:2"},
		{name: "WorkerAfterTerminalBeforeParentNotice", role: roleWorker, faults: "after-terminal-before-end:kill:1"},
		{name: "WorkerAfterDecisionBeforeChildStart", role: roleWorker, faults: "after-decision-before-children:kill"},
		{name: "SchedulerAfterAppendBeforeTask", role: roleScheduler, faults: "after-append-before-task:kill:1"},
		{name: "HistoryBeforeEffects", role: roleHistory, faults: "history-before-effects:kill:20"},
		{name: "HistoryBeforeIndex", role: roleHistory, faults: "history-before-index:kill:30"},
		{name: "HistoryBeforeAck", role: roleHistory, faults: "history-before-ack:kill:40"},
		{name: "HistoryMidLoad", role: roleHistory, killAfter: 5},
		// Flow control: the admission controller dies between taking a run's slot and appending
		// its run.admitted.
		{name: "SchedulerAfterReserveBeforeAdmitted", role: roleScheduler, faults: "admit-after-reserve:kill"},
	} {
		for _, be := range backends {
			t.Run(be.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				killBetweenWrites(t, be.start(t), tt.role, tt.faults, tt.killAfter, copies)
			})
		}
	}
}

func killBetweenWrites(t *testing.T, be backend, role, faults string, killAfter, copies int) {
	ctx := testContext(t)
	cfg := childConfig{Role: role, NATSURL: be.url, Dir: scratchDir(t), AckWait: time.Second, LeaseTTL: time.Second}
	// The other roles run in this process, undisturbed.
	if role != roleHistory {
		h, err := history.New(history.Config{Conn: be.connect(t), HTTPAddr: "off", Logger: natstest.Logger()})
		require.NoError(t, err)
		require.NoError(t, h.Start(ctx))
		t.Cleanup(func() { require.NoError(t, h.Stop()) })
		ingresstest.Start(t, ingress.Config{Conn: be.connect(t), HTTPAddr: "off", Logger: natstest.Logger()})
	}
	if role != roleWorker {
		w, err := worker.New(worker.Config{Conn: be.connect(t), Logger: natstest.Logger()}, faultRegistry())
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	}
	if role != roleScheduler {
		s, err := scheduler.New(scheduler.Config{Conn: be.connect(t), Logger: natstest.Logger()})
		require.NoError(t, err)
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { require.NoError(t, s.Stop()) })
	}
	victim := cfg.named(role + "-1")
	victim.Faults = faults
	first := startChild(t, victim)
	client, err := flow.NewClient(ctx, be.connect(t), nil)
	require.NoError(t, err)
	inputs := inputEngine(t, be.jetStream(t), nil)
	startWorkload(t, ctx, faultRegistry(), inputs, copies)

	if killAfter > 0 {
		require.Eventually(t, func() bool {
			page, err := client.Runs(ctx, &flow.RunsFilter{Status: []string{string(flow.StatusCompleted)}, Limit: 1})
			return err == nil && page.Total >= killAfter
		}, testTimeout, 10*time.Millisecond, "%d runs complete before the kill", killAfter)
		first.kill(t)
	} else {
		select {
		case <-first.exited:
		case <-ctx.Done():
			t.Fatalf("%s never reached %s", victim.Name, faults)
		}
	}
	require.ErrorContains(t, first.exitErr(), "killed", "%s died by SIGKILL", victim.Name)
	startChild(t, cfg.named(role+"-2"))
	sendWorkloadInputs(t, ctx, inputs, copies)
	awaitWorkload(t, ctx, client, copies)
	requireConsistent(t, ctx, be.jetStream(t), client)
}
