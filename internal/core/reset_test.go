package core_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// resetHistory: 1 run.started, 2 step.scheduled a, 3 step.failed a (not final), 4 its retry,
// 5 step.retry_fired, 6 step.completed, 7 child.scheduled kid, 8 signal.received, 9
// child.settled, 10 signal.awaited go (binds the signal), 11 decision.failed, 12 run.completed.
func resetHistory(t *testing.T) *history {
	h := newHistory(t, "r", event.Spec{})
	h.add(scheduled(stepSpec("a", "inc", `1`)),
		&event.StepFailed{StepID: "a", Attempt: 1, Error: event.ErrorInfo{Message: "x"}, Retryable: true},
		&event.StepRetryScheduled{StepID: "a", Attempt: 2, Due: epoch},
		&event.StepRetryFired{StepID: "a", Attempt: 2},
		&event.StepCompleted{StepID: "a", Attempt: 2, Output: json.RawMessage(`2`)},
		&event.ChildScheduled{Children: []event.ChildSpec{{ChildID: "kid", RunID: "r=kid", Definition: "child", Input: json.RawMessage(`null`), CancelPolicy: event.CancelPolicyRequest}}},
		&event.SignalReceived{Name: "go", Payload: json.RawMessage(`1`), DeliveryID: "d-1"},
		&event.ChildSettled{ChildID: "kid", RunID: "r=kid", Outcome: event.OutcomeCompleted, Output: json.RawMessage(`3`)},
		&event.SignalAwaited{WaitID: "go", Name: "go"},
		&event.DecisionFailed{Kind: "panic", Detail: "boom"},
		&event.RunCompleted{Output: json.RawMessage(`4`)},
	)
	require.Empty(t, core.Check("r", h.envs))
	return h
}

func TestResetPoints(t *testing.T) {
	t.Parallel()
	h := resetHistory(t)
	points, err := core.ResetPoints("r", h.envs)
	require.NoError(t, err)
	// Not 2 (decision), 3 (a failure whose retry is in the same commit), 7 and 10 (decisions),
	// 8 (the child runs there), 11 (decision.failed), 12 (terminal).
	require.Equal(t, []uint64{1, 4, 5, 6, 9}, points)
}

func TestPlanReset(t *testing.T) {
	t.Parallel()
	h := resetHistory(t)
	for _, tt := range []struct {
		name  string
		req   core.ResetRequest
		point uint64
		// reapplied are the sequences of the old run's inputs reapplied.
		reapplied []uint64
		err       string
	}{
		{name: "seq", req: core.ResetRequest{Mode: event.ResetToSeq, Seq: 6}, point: 6, reapplied: []uint64{8}},
		{name: "seq dropping inputs", req: core.ResetRequest{Mode: event.ResetToSeq, Seq: 6, DropInputs: true}, point: 6},
		{name: "seq 1", req: core.ResetRequest{Mode: event.ResetToSeq, Seq: 1}, point: 1, reapplied: []uint64{8}},
		{name: "step a", req: core.ResetRequest{Mode: event.ResetToStep, StepID: "a"}, point: 1, reapplied: []uint64{8}},
		{name: "last decision", req: core.ResetRequest{Mode: event.ResetToLastDecision}, point: 9},
		{name: "rerun a with input", req: core.ResetRequest{Mode: event.ResetRerun, StepID: "a", Input: json.RawMessage(` {"n": 2}`)}, point: 1, reapplied: []uint64{8}},
		{name: "child running", req: core.ResetRequest{Mode: event.ResetToSeq, Seq: 8},
			err: `seq 8 is not a reset point: child run(s) kid are running there: they belong to the old run; reset before they were scheduled or after they settled; nearest reset points: 6 (before), 9 (after)`},
		{name: "mid-commit failure", req: core.ResetRequest{Mode: event.ResetToSeq, Seq: 3}, err: "belongs to the same commit; nearest reset points: 1 (before), 4 (after)"},
		{name: "decision.failed", req: core.ResetRequest{Mode: event.ResetToSeq, Seq: 11}, err: "it is a decision.failed"},
		{name: "beyond", req: core.ResetRequest{Mode: event.ResetToSeq, Seq: 13}, err: "the run has 12 events"},
		{name: "no seq", req: core.ResetRequest{Mode: event.ResetToSeq}, err: "give the sequence of the point"},
		{name: "unknown step", req: core.ResetRequest{Mode: event.ResetToStep, StepID: "zz"}, err: `no step "zz" was scheduled`},
		{name: "bad mode", req: core.ResetRequest{Mode: "sideways"}, err: `reset mode "sideways"`},
		{name: "input without rerun", req: core.ResetRequest{Mode: event.ResetToSeq, Seq: 1, Input: json.RawMessage(`1`)}, err: "only a rerun replaces the input"},
		{name: "bad input", req: core.ResetRequest{Mode: event.ResetRerun, StepID: "a", Input: json.RawMessage(`{`)}, err: "not valid JSON"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := core.PlanReset("r", h.envs, tt.req)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				require.ErrorIs(t, err, core.ErrInvalidInput)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.point, plan.Point)
			require.Len(t, plan.Copied, int(tt.point-1))
			var got []uint64
			for _, e := range plan.Reapplied {
				got = append(got, e.Seq)
			}
			require.Equal(t, tt.reapplied, got)
			rf := plan.Started.ResetFrom
			require.Equal(t, uint64(12), rf.CopiedTo)
			require.Equal(t, len(tt.reapplied), rf.Reapplied)
			require.Equal(t, "r", rf.SeedRunID)
			require.Equal(t, tt.req.Input != nil, rf.InputReplaced)
			if tt.req.Input != nil {
				require.JSONEq(t, `{"n":2}`, string(plan.Started.Input))
			}

			// The new run's history is valid, and linked to the old one once it records
			// run.reset.
			nw := newHistory(t, "r=_reset-1", event.Spec{})
			nw.envs = nil
			for i, ev := range plan.Events(epoch, epoch.Add(time.Hour)) {
				nw.envs = append(nw.envs, event.Envelope{RunID: "r=_reset-1", Seq: uint64(i + 1), Time: ev.Time, Payload: ev.Payload})
			}
			require.Empty(t, core.Check("r=_reset-1", nw.envs))
			old := &history{t: t, run: "r", now: h.now, envs: append([]event.Envelope(nil), h.envs...)}
			ps, err := core.RecordReset(old.snapshot(), "r=_reset-1", plan)
			require.NoError(t, err)
			recordedAt := uint64(len(old.envs) + 1)
			old.add(ps...)
			require.Empty(t, core.Check("r", old.envs))
			require.Empty(t, core.CheckReset("r", old.envs, "r=_reset-1", nw.envs))
			_, err = core.RecordReset(old.snapshot(), "r=_reset-1", plan)
			require.ErrorIs(t, err, core.ErrDuplicate)

			// The record alone derives the same new run, for every writer that starts it.
			rr := old.envs[recordedAt-1].Payload.(*event.RunReset)
			again, err := core.PlanRecorded("r", old.envs, rr, recordedAt)
			require.NoError(t, err)
			require.Equal(t, plan.Events(epoch, epoch.Add(time.Hour)), again.Events(epoch, epoch.Add(time.Hour)))

			// A copy that differs, or a missing run.reset, is found.
			bad := append([]event.Envelope(nil), nw.envs...)
			if tt.point > 1 {
				bad[1].Time = bad[1].Time.Add(time.Second)
				require.NotEmpty(t, core.CheckReset("r", old.envs, "r=_reset-1", bad))
			}
			require.NotEmpty(t, core.CheckReset("r", h.envs, "r=_reset-1", nw.envs))
		})
	}
}

// run.reset is the one event after the terminal event; an active run's run.reset must be
// followed by its termination; nothing else may follow it.
func TestCheckResetOrder(t *testing.T) {
	t.Parallel()
	reset := func(terminated bool) *event.RunReset {
		return &event.RunReset{NewRunID: "n", Seq: 1, Mode: event.ResetToSeq, Terminated: terminated}
	}
	rules := func(h *history) []string {
		var out []string
		for _, v := range core.Check(h.run, h.envs) {
			out = append(out, v.Rule)
		}
		return out
	}
	h := newHistory(t, "a", event.Spec{}).add(&event.RunCompleted{Output: json.RawMessage(`1`)}, reset(false))
	require.Empty(t, rules(h))
	h = newHistory(t, "b", event.Spec{}).add(&event.RunCompleted{Output: json.RawMessage(`1`)}, reset(true))
	require.Equal(t, []string{"reset_order"}, rules(h))
	h = newHistory(t, "c", event.Spec{}).add(reset(false))
	require.Equal(t, []string{"reset_order"}, rules(h))
	h = newHistory(t, "d", event.Spec{}).add(reset(true))
	require.Equal(t, []string{"reset_order"}, rules(h), "the termination is missing")
	h = newHistory(t, "e", event.Spec{}).add(reset(true), &event.RunFailed{Error: event.ErrorInfo{Message: "reset"}, Cause: event.CauseOperator})
	require.Empty(t, rules(h))
	h = newHistory(t, "f", event.Spec{}).add(reset(true), &event.SignalReceived{Name: "x", Payload: json.RawMessage(`1`), DeliveryID: "d"},
		&event.RunFailed{Error: event.ErrorInfo{Message: "reset"}, Cause: event.CauseOperator})
	require.Equal(t, []string{"reset_order"}, rules(h))
	h = newHistory(t, "g", event.Spec{}).add(&event.RunCompleted{Output: json.RawMessage(`1`)}, reset(false), reset(false))
	require.Equal(t, []string{"duplicate_id"}, rules(h))
	h = newHistory(t, "h", event.Spec{}).add(&event.RunCompleted{Output: json.RawMessage(`1`)}, reset(false),
		&event.SignalReceived{Name: "x", Payload: json.RawMessage(`1`), DeliveryID: "d"})
	require.Equal(t, []string{"after_terminal"}, rules(h))
}
