package core_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

var keyed = &event.FlowControl{Group: "reports", Key: "c-42", KeyPath: "$.customer", KeyConcurrency: 2}

// controlledHistory starts a run under flow control, with priority 3.
func controlledHistory(t *testing.T) *history {
	h := &history{t: t, run: "ctl", now: epoch}
	return h.add(&event.RunStarted{Spec: event.Spec{Definition: "report"}, Input: json.RawMessage(`{"customer":"c-42"}`),
		Seed: "s", Priority: 3, Control: keyed})
}

func TestQueuedRunWaitsForAdmission(t *testing.T) {
	t.Parallel()
	h := controlledHistory(t)
	s := h.snapshot()
	require.Equal(t, core.StatusQueued, s.Status)
	require.True(t, s.Queued())
	require.Equal(t, 3, s.Priority)
	require.Contains(t, s.Summary().Detail, `waiting for admission under flow control (group reports, key "c-42", at most 2 running per key`)

	asked := false
	code := script{fn: func(*core.Snapshot) core.Decision { asked = true; return core.Complete{Output: json.RawMessage(`1`)} }}
	v, err := core.Decide(s, code, core.DecideOptions{})
	require.NoError(t, err)
	require.True(t, v.Waiting())
	require.Equal(t, "admission", v.WaitingOn)
	require.False(t, asked, "the code of a queued run is never asked")

	// A signal is buffered while queued.
	ps, err := core.ReceiveSignal(s, "go", json.RawMessage(`1`), "d1")
	require.NoError(t, err)
	h.add(ps...)
	require.Equal(t, core.StatusQueued, h.snapshot().Status)

	ps, err = core.Admit(h.snapshot(), h.now.Add(2*time.Second))
	require.NoError(t, err)
	require.Equal(t, &event.RunAdmitted{Group: "reports", Key: "c-42", Queued: event.Duration(4 * time.Second)}, ps[0])
	h.add(ps...)
	s = h.snapshot()
	require.False(t, s.Queued())
	require.True(t, s.Admitted)
	require.Equal(t, uint64(3), s.AdmittedSeq)
	require.Equal(t, core.StatusPending, s.Status)
	v, err = core.Decide(s, code, core.DecideOptions{})
	require.NoError(t, err)
	require.True(t, asked)
	require.IsType(t, &event.RunCompleted{}, v.Events[0])
	d := core.Derive(s, h.envs[2:])
	require.True(t, d.Resume, "run.admitted is an input: the run is driven after it")
	require.Equal(t, uint64(3), d.TaskSeq)
}

func TestAdmitRefusals(t *testing.T) {
	t.Parallel()
	plain := newHistory(t, "plain", event.Spec{}).snapshot()
	_, err := core.Admit(plain, epoch)
	require.ErrorIs(t, err, core.ErrInvalidInput)

	h := controlledHistory(t)
	ps, _ := core.Admit(h.snapshot(), h.now)
	_, err = core.Admit(h.add(ps...).snapshot(), h.now)
	require.ErrorIs(t, err, core.ErrStale, "admitted already")

	h = controlledHistory(t)
	h.add(&event.RunCancelRequested{Reason: "no longer needed"})
	_, err = core.Admit(h.snapshot(), h.now)
	require.ErrorIs(t, err, core.ErrStale, "being cancelled")
	// A queued run whose cancellation is requested ends at once, never admitted.
	v, err := core.Decide(h.snapshot(), always(core.Complete{}), core.DecideOptions{})
	require.NoError(t, err)
	require.Equal(t, []event.Payload{&event.RunCancelled{Reason: "cancellation requested while waiting for admission: no longer needed",
		Cause: event.CauseCancelRequested}}, v.Events)
	h.add(v.Events...)
	_, err = core.Admit(h.snapshot(), h.now)
	require.ErrorIs(t, err, core.ErrStale, "ended")
	require.Empty(t, core.Check("ctl", h.envs))
}

func TestCancelByControl(t *testing.T) {
	t.Parallel()
	h := controlledHistory(t)
	ps, _ := core.Admit(h.snapshot(), h.now)
	h.add(ps...).add(scheduled(stepSpec("a", "work", `1`)))
	ps, err := core.CancelByControl(h.snapshot(), "replaced by run x")
	require.NoError(t, err)
	require.Equal(t, []event.Payload{
		&event.StepCancelled{Steps: []event.CancelledStep{{StepID: "a", Attempt: 1, SideEffectUnknown: true}}, Reason: "replaced by run x", Cause: event.CauseFlowControl},
		&event.RunCancelled{Reason: "replaced by run x", Cause: event.CauseFlowControl},
	}, ps)
	h.add(ps...)
	s := h.snapshot()
	require.Equal(t, core.StatusCancelled, s.Status)
	require.Equal(t, event.CauseFlowControl, s.Outcome.Cause)
	require.Empty(t, core.Check("ctl", h.envs))
	// Not a decision of the code: a replay of the history does not ask the code for it.
	_, err = core.Replay("ctl", h.envs, always(core.ScheduleSteps{Steps: []core.StepCall{call("a", "work", `1`)}}), core.DecideOptions{})
	require.NoError(t, err)
	_, err = core.CancelByControl(s, "again")
	require.ErrorIs(t, err, core.ErrTerminal)
}

func TestAdmissionInvariants(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    func(t *testing.T) *history
		rule string
	}{
		{"admitted without control", func(t *testing.T) *history {
			return newHistory(t, "ctl", event.Spec{}).add(&event.RunAdmitted{Group: "g"})
		}, "not_controlled"},
		{"admitted twice", func(t *testing.T) *history {
			return controlledHistory(t).add(&event.RunAdmitted{Group: "reports"}, &event.RunAdmitted{Group: "reports"})
		}, "duplicate_admission"},
		{"decided before admission", func(t *testing.T) *history {
			return controlledHistory(t).add(scheduled(stepSpec("a", "work", `1`)))
		}, "not_admitted"},
		{"completed before admission", func(t *testing.T) *history {
			return controlledHistory(t).add(&event.RunCompleted{Output: json.RawMessage(`1`)})
		}, "not_admitted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := tc.h(t)
			vs := core.Check("ctl", h.envs)
			require.Len(t, vs, 1, "%v", vs)
			require.Equal(t, tc.rule, vs[0].Rule)
			_, err := core.Project("ctl", h.envs)
			var he *core.HistoryError
			require.True(t, errors.As(err, &he))
		})
	}
	// Cancelled or terminated while queued is a valid history.
	h := controlledHistory(t).add(&event.RunCancelled{Reason: "skip", Cause: event.CauseFlowControl})
	require.Empty(t, core.Check("ctl", h.envs))
	require.Equal(t, core.StatusCancelled, h.snapshot().Status)
}

// A reset run waiting to be admitted anew whose copy holds an unsettled step (here a retry
// that fired in the old run) and whose cancellation is requested (copied too) ends with the
// step cancelled first: a valid history, not a run quarantined for "unsettled_at_end". Found
// by the torture test (a batch reset of a run being cancelled, then the reset run cancelled
// while queued).
func TestQueuedResetRunCancelledWithCopiedSteps(t *testing.T) {
	t.Parallel()
	h := controlledHistory(t)
	ps, _ := core.Admit(h.snapshot(), h.now)
	h.add(ps...).add(scheduled(stepSpec("a", "work", `1`)),
		&event.StepFailed{StepID: "a", Attempt: 1, Error: event.ErrorInfo{Message: "x"}, Retryable: true},
		&event.StepRetryScheduled{StepID: "a", Attempt: 2, Due: epoch},
		&event.RunCancelRequested{Reason: "stop"},
		&event.StepRetryFired{StepID: "a", Attempt: 2})
	require.Empty(t, core.Check("ctl", h.envs))
	plan, err := core.PlanReset("ctl", h.envs, core.ResetRequest{Mode: event.ResetToSeq, Seq: uint64(len(h.envs)), DropInputs: true})
	require.NoError(t, err)
	nw := &history{t: t, run: "ctl=_reset-1", now: h.now}
	for i, ev := range plan.Events(epoch, h.now) {
		nw.envs = append(nw.envs, event.Envelope{RunID: nw.run, Seq: uint64(i + 1), Time: ev.Time, Payload: ev.Payload})
	}
	s := nw.snapshot()
	require.True(t, s.Queued(), "admitted anew")
	require.NotEmpty(t, s.Unsettled())
	if !s.CancelRequested {
		nw.add(&event.RunCancelRequested{Reason: "stop"})
	}
	v, err := core.Decide(nw.snapshot(), always(core.Complete{}), core.DecideOptions{})
	require.NoError(t, err)
	require.Len(t, v.Events, 2)
	require.IsType(t, &event.StepCancelled{}, v.Events[0])
	require.IsType(t, &event.RunCancelled{}, v.Events[1])
	nw.add(v.Events...)
	require.Empty(t, core.Check(nw.run, nw.envs))
}
