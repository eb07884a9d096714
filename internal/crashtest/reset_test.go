package crashtest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// TestIngressKilledBetweenResetWrites kills, with SIGKILL, the ingress process that applies a
// reset, between the reset's two writes (fault point after-reset-record-before-start): the old
// run records run.reset and ends, the new run it names is not written yet. The history service,
// applying the old run's commit, writes the new run; it is driven to its signal wait; a signal
// sent to the old run's ID reaches the new run; a repeat of the reset returns the same new run.
// Both histories pass the invariants checker and the reset's link check (core.CheckReset).
func TestIngressKilledBetweenResetWrites(t *testing.T) {
	t.Parallel()
	be := singleServer(t)
	ctx := testContext(t)
	h, err := history.New(history.Config{Conn: be.connect(t), HTTPAddr: "off", Logger: natstest.Logger()})
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	w, err := worker.New(worker.Config{Conn: be.connect(t), Logger: natstest.Logger()}, faultRegistry())
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	s, err := scheduler.New(scheduler.Config{Conn: be.connect(t), Logger: natstest.Logger()})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop()) })

	// The only ingress is the victim, armed to die between the reset's writes.
	victim := childConfig{Role: roleIngress, Name: "ingress-1", NATSURL: be.url, Dir: scratchDir(t), HTTP: "off",
		Faults: "after-reset-record-before-start:kill"}
	first := startChild(t, victim)
	client, err := flow.NewClient(ctx, be.connect(t), nil)
	require.NoError(t, err)
	inputs := inputEngine(t, be.jetStream(t), nil)
	_, _, err = inputs.Start(ctx, engine.StartParams{RunID: "w-1", Spec: event.Spec{Definition: "waiter"}, Input: json.RawMessage(`null`)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		snap, err := client.Snapshot(ctx, "w-1")
		return err == nil && snap.Status == core.StatusSuspended
	}, testTimeout, 10*time.Millisecond, "the run waits for its signal")

	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = client.Reset(rctx, "w-1", &flow.ResetOptions{LastDecision: true, RequestID: "reset-1", Reason: "kill test"})
	cancel()
	require.Error(t, err, "the ingress died before it answered")
	select {
	case <-first.exited:
	case <-ctx.Done():
		t.Fatal("the ingress never reached after-reset-record-before-start")
	}
	require.ErrorContains(t, first.exitErr(), "killed")

	// The old run recorded run.reset and ended; the history service writes the new run.
	var newID string
	require.Eventually(t, func() bool {
		snap, err := client.Snapshot(ctx, "w-1")
		if err != nil || len(snap.Resets) == 0 || !snap.Terminal() {
			return false
		}
		newID = snap.Resets[0].NewRunID
		return true
	}, testTimeout, 10*time.Millisecond, "the old run records its reset")
	require.True(t, strings.HasPrefix(newID, "w-1=_reset-"))
	require.Eventually(t, func() bool {
		snap, err := client.Snapshot(ctx, newID)
		return err == nil && snap.Status == core.StatusSuspended && snap.Seq == 2
	}, testTimeout, 10*time.Millisecond, "the new run waits for its signal again")

	// A fresh ingress: a repeat of the reset returns the same run; a signal to the old ID
	// reaches it.
	ingresstest.Start(t, ingress.Config{Conn: be.connect(t), HTTPAddr: "off", Logger: natstest.Logger()})
	r, err := client.Reset(ctx, "w-1", &flow.ResetOptions{LastDecision: true, RequestID: "reset-1", Reason: "kill test"})
	require.NoError(t, err)
	require.Equal(t, newID, r.NewRunID)
	to, err := client.Signal(ctx, "w-1", "go", "go!", &flow.DeliveryOptions{DeliveryID: "signal-1"})
	require.NoError(t, err)
	require.Equal(t, newID, to)
	var out string
	result(t, ctx, client, newID, &out)
	require.Equal(t, "go!", out)

	old, err := client.History(ctx, "w-1", 0)
	require.NoError(t, err)
	nw, err := client.History(ctx, newID, 0)
	require.NoError(t, err)
	require.Equal(t, 1, countTypes(old)[event.TypeRunReset], "run.reset recorded once")
	require.Empty(t, core.Check("w-1", old))
	require.Empty(t, core.Check(newID, nw))
	require.Empty(t, core.CheckReset("w-1", old, newID, nw))
	requireConsistent(t, ctx, be.jetStream(t), client)
}
