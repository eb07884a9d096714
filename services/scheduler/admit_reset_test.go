package scheduler_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
)

// A reset never escapes flow control (issue 19, finding 1): the reset run is admitted anew,
// taking a slot like any start, although its copy holds the old run's run.admitted. With a key
// limit of 1, resetting the active run a-1 ends it; the reset run keeps a-1's place in the queue
// (its run.started is a-1's) and takes the freed slot, while a-2, started later, waits until it
// ends. Resetting an ended run brings back no run that holds no slot either.
func TestResetIsAdmittedAnew(t *testing.T) {
	t.Parallel()
	fc := flow.FlowControl{KeyPath: "$.customer", KeyConcurrency: 1}
	e := newControlEnv(t, gated(flow.WithFlowControl(fc)), nil)
	e.scheduler(nil)
	e.start("a-1", "a", 1, nil)
	e.status("a-1", core.StatusSuspended)
	e.start("a-2", "a", 2, nil)
	e.status("a-2", core.StatusQueued)

	r, err := e.client.Reset(e.ctx, "a-1", &flow.ResetOptions{LastDecision: true})
	require.NoError(t, err)
	s := e.status(r.NewRunID, core.StatusSuspended)
	require.Greater(t, s.AdmittedSeq, s.ResetFrom.Seq, "admitted by an admission of its own, after the copy")
	require.Equal(t, core.StatusQueued, e.status("a-2", core.StatusQueued).Status)
	e.done(r.NewRunID)
	e.status("a-2", core.StatusSuspended)
	e.done("a-2")

	// A reset of an ended run queues too, and runs only once the key's slot is free.
	e.start("a-3", "a", 3, nil)
	e.status("a-3", core.StatusSuspended)
	r2, err := e.client.Reset(e.ctx, "a-2", &flow.ResetOptions{Seq: 2, DropInputs: true}) // right after its admission
	require.NoError(t, err)
	e.status(r2.NewRunID, core.StatusQueued)
	e.done("a-3")
	e.status(r2.NewRunID, core.StatusSuspended)
	e.done(r2.NewRunID)

	// At no instant did key a hold two admitted runs.
	var spans [][2]string
	type span struct{ from, to int64 }
	var all []span
	for _, id := range []string{"a-1", "a-2", "a-3", r.NewRunID, r2.NewRunID} {
		admitted, ended := e.admittedAt(id)
		if id == "a-1" {
			require.False(t, ended.IsZero())
		}
		all = append(all, span{admitted.UnixNano(), ended.UnixNano()})
		spans = append(spans, [2]string{id, admitted.String() + " .. " + ended.String()})
	}
	for i := range all {
		for j := range all {
			if i != j && all[i].from < all[j].to && all[j].from < all[i].to {
				t.Fatalf("runs overlap under a key limit of 1: %v", spans)
			}
		}
	}
}

// TestResetKeepsTheOldRunsTurn: the reset of an active holder hands its slot's turn to the
// reset's new run, which keeps the old run's place, even when the new run queues well after
// the old run's end shows in the runs index (here the history service fails to apply the new
// run's first commit for a few seconds): the run queued behind the old one waits. Found as a
// flake of TestResetIsAdmittedAnew under load, where the admitter handed the slot to the only
// run queued at the old run's end.
func TestResetKeepsTheOldRunsTurn(t *testing.T) {
	t.Parallel()
	fc := flow.FlowControl{KeyPath: "$.customer", KeyConcurrency: 1}
	hf := &fault.Injector{}
	// One lane: the history service applies the commits in the stream's order.
	e := newControlEnvWith(t, gated(flow.WithFlowControl(fc)), history.Config{Faults: hf, Lanes: 1})
	e.scheduler(nil)
	e.start("a-1", "a", 1, nil)
	e.status("a-1", core.StatusSuspended)
	e.start("a-2", "a", 2, nil)
	e.status("a-2", core.StatusQueued)

	// The reset's commit to a-1 is applied (its end shows in the runs index); the new run's
	// first commit, after it in the stream, fails 5 times (about 3 s of retries) before it is
	// applied and the new run queues.
	hf.Arm(fault.HistoryBeforeEffects, fault.Fail, 1, 5)
	r, err := e.client.Reset(e.ctx, "a-1", &flow.ResetOptions{LastDecision: true})
	require.NoError(t, err)
	e.status(r.NewRunID, core.StatusSuspended)
	require.Equal(t, core.StatusQueued, e.status("a-2", core.StatusQueued).Status, "a-2 waited behind a-1, whose place the reset run keeps")
	e.done(r.NewRunID)
	e.status("a-2", core.StatusSuspended)
}

// TestResetRunAdmittedBesideItsOldRunsSlot: with room for both, the reset of an active holder
// is admitted in another slot before the old run's slot is released; the old slot goes at once
// then, not after the handover's grace. Found by the torture test (a slot of a reset run left
// held for seconds after its end).
func TestResetRunAdmittedBesideItsOldRunsSlot(t *testing.T) {
	t.Parallel()
	e := newControlEnv(t, gated(flow.WithFlowControl(flow.FlowControl{Concurrency: 2})), nil)
	e.scheduler(nil)
	e.start("a-1", "a", 1, nil)
	e.status("a-1", core.StatusSuspended)
	r, err := e.client.Reset(e.ctx, "a-1", &flow.ResetOptions{LastDecision: true})
	require.NoError(t, err)
	e.status(r.NewRunID, core.StatusSuspended)
	var st *limits.State
	require.Eventually(t, func() bool {
		cur, _, err := e.lims.Load(e.ctx, "gated")
		if err != nil {
			return false
		}
		st = cur
		_, held := st.Holders["a-1"]
		return !held
	}, 5*time.Second, 5*time.Millisecond, "the ended a-1 still holds a slot (the handover's grace is 10 s)")
	require.Contains(t, st.Holders, r.NewRunID)
}
