package core_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// updating is a script whose workflow also handles updates with fn (accepted: see
// core.UpdateDecider).
type updating struct {
	script
	fn func(s *core.Snapshot, u *core.Update, accepted bool) core.UpdateDecision
}

var _ core.UpdateDecider = updating{}

func (d updating) DecideUpdate(_ string, _ json.RawMessage, s *core.Snapshot, u *core.Update, accepted bool) (core.UpdateDecision, error) {
	return d.fn(s, u, accepted), nil
}

// rejectNegative accepts an update whose payload is a non-negative number and leaves it open;
// complete adds completing it at once with the payload doubled.
func rejectNegative(complete bool) func(*core.Snapshot, *core.Update, bool) core.UpdateDecision {
	return func(_ *core.Snapshot, u *core.Update, accepted bool) core.UpdateDecision {
		var n int
		_ = json.Unmarshal(u.Payload, &n)
		if n < 0 && !accepted {
			return core.UpdateDecision{Reject: &event.ErrorInfo{Kind: "invalid", Message: "amount must not be negative"}}
		}
		if complete {
			out, _ := json.Marshal(2 * n)
			return core.UpdateDecision{Complete: true, Result: out}
		}
		return core.UpdateDecision{}
	}
}

// stepThenComplete schedules step "charge" and, once it completed, completes every open update
// with the step's output, then completes the run.
func stepThenComplete(s *core.Snapshot) core.Decision {
	st, ok := s.Steps["charge"]
	if !ok || !st.Status.Settled() {
		return core.ScheduleSteps{Steps: []core.StepCall{call("charge", "charge", `1`)}}
	}
	if open := s.OpenUpdates(); len(open) > 0 {
		return core.CompleteUpdate{ID: open[0].ID, Result: st.Output}
	}
	return core.Complete{Output: json.RawMessage(`"done"`)}
}

func TestUpdates(t *testing.T) {
	received := func(id, name, payload string) *event.UpdateReceived {
		return &event.UpdateReceived{UpdateID: id, Name: name, Payload: json.RawMessage(payload)}
	}
	cases := []struct {
		name    string
		history func(h *history)
		decider core.Decider
		// want are the event types of the verdict; waiting is its WaitingOn when it waits.
		want    []event.Type
		waiting string
		check   func(t *testing.T, v core.Verdict)
	}{{
		name: "rejected while a step is in flight: the step is untouched",
		history: func(h *history) {
			h.add(scheduled(stepSpec("charge", "charge", `1`)), received("u1", "add", `-3`))
		},
		decider: updating{script{fn: stepThenComplete}, rejectNegative(false)},
		want:    []event.Type{event.TypeUpdateRejected},
		check: func(t *testing.T, v core.Verdict) {
			r := v.Events[0].(*event.UpdateRejected)
			require.Equal(t, "u1", r.UpdateID)
			require.Equal(t, "amount must not be negative", r.Error.Message)
		},
	}, {
		name: "accepted and completed at once by its handler",
		history: func(h *history) {
			h.add(scheduled(stepSpec("charge", "charge", `1`)), received("u1", "add", `21`))
		},
		decider: updating{script{fn: stepThenComplete}, rejectNegative(true)},
		want:    []event.Type{event.TypeUpdateAccepted, event.TypeUpdateCompleted},
		check: func(t *testing.T, v core.Verdict) {
			require.JSONEq(t, `42`, string(v.Events[1].(*event.UpdateCompleted).Result))
		},
	}, {
		name: "accepted, the run keeps waiting on its step after that",
		history: func(h *history) {
			h.add(scheduled(stepSpec("charge", "charge", `1`)), received("u1", "add", `5`), &event.UpdateAccepted{UpdateID: "u1"})
		},
		decider: updating{script{fn: stepThenComplete}, rejectNegative(false)},
		waiting: `step "charge"`,
	}, {
		name: "completed by the workflow after the step",
		history: func(h *history) {
			h.add(scheduled(stepSpec("charge", "charge", `1`)), received("u1", "add", `5`), &event.UpdateAccepted{UpdateID: "u1"},
				&event.StepCompleted{StepID: "charge", Attempt: 1, Output: json.RawMessage(`{"paid":5}`)})
		},
		decider: updating{script{fn: stepThenComplete}, rejectNegative(false)},
		want:    []event.Type{event.TypeUpdateCompleted},
		check: func(t *testing.T, v core.Verdict) {
			require.JSONEq(t, `{"paid":5}`, string(v.Events[0].(*event.UpdateCompleted).Result))
		},
	}, {
		name: "oldest undecided first",
		history: func(h *history) {
			h.add(received("u1", "add", `1`), received("u2", "add", `-1`))
		},
		decider: updating{script{fn: stepThenComplete}, rejectNegative(false)},
		want:    []event.Type{event.TypeUpdateAccepted},
		check: func(t *testing.T, v core.Verdict) {
			require.Equal(t, "u1", v.Events[0].(*event.UpdateAccepted).UpdateID)
		},
	}, {
		name:    "code without update handlers rejects",
		history: func(h *history) { h.add(received("u1", "add", `1`)) },
		decider: script{fn: stepThenComplete},
		want:    []event.Type{event.TypeUpdateRejected},
		check: func(t *testing.T, v core.Verdict) {
			require.Equal(t, core.UpdateNoHandler, v.Events[0].(*event.UpdateRejected).Error.Kind)
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(t, "run-1", event.Spec{})
			tc.history(h)
			v, err := core.Decide(h.snapshot(), tc.decider, core.DecideOptions{})
			require.NoError(t, err)
			if tc.waiting != "" {
				require.True(t, v.Waiting())
				require.Equal(t, tc.waiting, v.WaitingOn)
				return
			}
			var types []event.Type
			for _, p := range v.Events {
				types = append(types, p.EventType())
			}
			require.Equal(t, tc.want, types)
			if tc.check != nil {
				tc.check(t, v)
			}
			// What the decision records is a valid extension of the history.
			h.add(v.Events...)
			require.Empty(t, core.Check("run-1", h.envs))
		})
	}
}

func TestReceiveUpdate(t *testing.T) {
	h := newHistory(t, "run-1", event.Spec{}).add(&event.UpdateReceived{UpdateID: "u1", Name: "add", Payload: json.RawMessage(`{"n":1}`)})
	live := h.snapshot()
	ended := newHistory(t, "run-1", event.Spec{}).add(&event.UpdateReceived{UpdateID: "u1", Name: "add", Payload: json.RawMessage(`{"n":1}`)},
		&event.RunCompleted{Output: json.RawMessage(`null`)}).snapshot()
	cases := []struct {
		name    string
		s       *core.Snapshot
		id, upd string
		payload string
		want    error
	}{
		{"new update", live, "u2", "add", `1`, nil},
		{"the same update ID twice", live, "u1", "add", `{ "n": 1 }`, core.ErrDuplicate},
		{"the same update ID twice after the run ended", ended, "u1", "add", `{"n":1}`, core.ErrDuplicate},
		{"the same ID with another payload", live, "u1", "add", `{"n":2}`, core.ErrDeliveryConflict},
		{"the same ID with another name", live, "u1", "remove", `{"n":1}`, core.ErrDeliveryConflict},
		{"an update to an ended run", ended, "u2", "add", `1`, core.ErrTerminal},
		{"an update to a run that does not exist", core.New("nope"), "u1", "add", `1`, core.ErrNotFound},
		{"a bad name", live, "u2", "a.b", `1`, core.ErrInvalidInput},
		{"a bad update ID", live, "u 2", "add", `1`, core.ErrInvalidInput},
		{"bad JSON", live, "u2", "add", `{`, core.ErrInvalidInput},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			events, err := core.ReceiveUpdate(tc.s, tc.id, tc.upd, json.RawMessage(tc.payload))
			if tc.want == nil {
				require.NoError(t, err)
				require.Len(t, events, 1)
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.Empty(t, events)
		})
	}
}

func TestCompleteUpdateDecision(t *testing.T) {
	base := func() *history {
		return newHistory(t, "run-1", event.Spec{}).add(
			&event.UpdateReceived{UpdateID: "open", Name: "add", Payload: json.RawMessage(`1`)}, &event.UpdateAccepted{UpdateID: "open"},
			&event.UpdateReceived{UpdateID: "done", Name: "add", Payload: json.RawMessage(`1`)}, &event.UpdateAccepted{UpdateID: "done"},
			&event.UpdateCompleted{UpdateID: "done", Result: json.RawMessage(`2`)},
			&event.UpdateReceived{UpdateID: "no", Name: "add", Payload: json.RawMessage(`1`)},
			&event.UpdateRejected{UpdateID: "no", Error: event.ErrorInfo{Message: "no"}})
	}
	s := base().snapshot()
	v, err := core.Validate(s, core.CompleteUpdate{ID: "open", Result: json.RawMessage(`{"ok": true}`)})
	require.NoError(t, err)
	require.Equal(t, &event.UpdateCompleted{UpdateID: "open", Result: json.RawMessage(`{"ok":true}`)}, v.Events[0])
	v, err = core.Validate(s, core.CompleteUpdate{ID: "open", Error: &event.ErrorInfo{Kind: "out_of_stock"}})
	require.NoError(t, err)
	require.Equal(t, "update failed", v.Events[0].(*event.UpdateCompleted).Error.Message)
	for id, code := range map[string]string{"done": core.CodeAlreadySettled, "no": core.CodeAlreadySettled, "missing": core.CodeInvalidDecision} {
		_, err := core.Validate(s, core.CompleteUpdate{ID: id, Result: json.RawMessage(`1`)})
		var inv *core.InvalidDecisionError
		require.ErrorAs(t, err, &inv, id)
		require.Equal(t, code, inv.Code, id)
	}
	_, err = core.Validate(s, core.CompleteUpdate{ID: "open", Result: json.RawMessage(`{`)})
	require.ErrorIs(t, err, core.ErrInvalidDecision)
	require.Len(t, s.OpenUpdates(), 1)
	require.Len(t, s.UpdateList(), 3)
}

func TestUpdateReplay(t *testing.T) {
	accepts := updating{script{fn: stepThenComplete}, rejectNegative(false)}
	h := newHistory(t, "run-1", event.Spec{}).add(scheduled(stepSpec("charge", "charge", `1`)),
		&event.UpdateReceived{UpdateID: "u1", Name: "add", Payload: json.RawMessage(`5`)}, &event.UpdateAccepted{UpdateID: "u1"},
		&event.StepCompleted{StepID: "charge", Attempt: 1, Output: json.RawMessage(`7`)},
		&event.UpdateCompleted{UpdateID: "u1", Result: json.RawMessage(`7`)})
	_, err := core.Replay("run-1", h.envs, accepts, core.DecideOptions{})
	require.NoError(t, err)

	// A validator that would now judge otherwise is not asked: TestUpdateReplayUsesRecordedVerdict.

	// A handler that completes at once on replay what history left open differs.
	var nd *core.NonDeterminismError
	atOnce := updating{script{fn: stepThenComplete}, rejectNegative(true)}
	_, err = core.Replay("run-1", h.envs, atOnce, core.DecideOptions{})
	require.ErrorAs(t, err, &nd)

	// A different result of the workflow's completion is a field mismatch of the update.
	other := updating{script{fn: func(s *core.Snapshot) core.Decision {
		if d, ok := stepThenComplete(s).(core.CompleteUpdate); ok {
			d.Result = json.RawMessage(`8`)
			return d
		}
		return stepThenComplete(s)
	}}, rejectNegative(false)}
	_, err = core.Replay("run-1", h.envs, other, core.DecideOptions{})
	require.ErrorAs(t, err, &nd)
	require.Equal(t, "update", nd.Kind)
	require.Equal(t, "result", nd.Field)
}

// verdicts is an update handler for replay tests: validate judges the updates it is asked to
// validate (nil accepts), complete, when set, completes accepted ones at once; validated lists
// the IDs of the updates it validated.
type verdicts struct {
	validate  func(amount int) *event.ErrorInfo
	complete  func(amount int) json.RawMessage
	validated *[]string
}

func (v verdicts) decide(_ *core.Snapshot, u *core.Update, accepted bool) core.UpdateDecision {
	var n int
	_ = json.Unmarshal(u.Payload, &n)
	if !accepted {
		*v.validated = append(*v.validated, u.ID)
		if v.validate != nil {
			if e := v.validate(n); e != nil {
				return core.UpdateDecision{Reject: e}
			}
		}
	}
	if v.complete != nil {
		return core.UpdateDecision{Complete: true, Result: v.complete(n)}
	}
	return core.UpdateDecision{}
}

// TestUpdateReplayUsesRecordedVerdict: replay takes an update's acceptance or rejection from
// history and never runs the validator for it, so code whose validator changed (it would reject
// what history accepted, or accept what it rejected) replays the runs judged before; only an
// update without a recorded verdict meets the validator deployed now. The handler's at-once
// completion is still re-derived and compared.
func TestUpdateReplayUsesRecordedVerdict(t *testing.T) {
	received := func(id string, amount int) *event.UpdateReceived {
		return &event.UpdateReceived{UpdateID: id, Name: "add", Payload: json.RawMessage(fmt.Sprint(amount))}
	}
	negative := event.ErrorInfo{Kind: "invalid", Message: "amount must not be negative"}
	positiveOnly := func(n int) *event.ErrorInfo { // the validator that judged the histories
		if n < 0 {
			return &negative
		}
		return nil
	}
	inverted := func(n int) *event.ErrorInfo { // a redeploy's: it rejects what was accepted, and vice versa
		if n >= 0 {
			return &event.ErrorInfo{Kind: "closed", Message: "deposits are closed"}
		}
		return nil
	}
	rejectAll := func(int) *event.ErrorInfo { return &event.ErrorInfo{Kind: "closed", Message: "closed"} }
	double := func(n int) json.RawMessage { return json.RawMessage(fmt.Sprint(2 * n)) }
	triple := func(n int) json.RawMessage { return json.RawMessage(fmt.Sprint(3 * n)) }

	// judged: u1 accepted and completed after step "charge", u2 rejected; the run completed.
	judged := []event.Payload{scheduled(stepSpec("charge", "charge", `1`)),
		received("u1", 5), &event.UpdateAccepted{UpdateID: "u1"},
		received("u2", -3), &event.UpdateRejected{UpdateID: "u2", Error: negative},
		&event.StepCompleted{StepID: "charge", Attempt: 1, Output: json.RawMessage(`7`)},
		&event.UpdateCompleted{UpdateID: "u1", Result: json.RawMessage(`7`)},
		&event.RunCompleted{Output: json.RawMessage(`"done"`)}}
	// atOnce: u1 accepted and completed at once (its payload doubled) in one commit.
	atOnce := []event.Payload{scheduled(stepSpec("charge", "charge", `1`)),
		received("u1", 5), &event.UpdateAccepted{UpdateID: "u1"}, &event.UpdateCompleted{UpdateID: "u1", Result: json.RawMessage(`10`)},
		&event.StepCompleted{StepID: "charge", Attempt: 1, Output: json.RawMessage(`7`)},
		&event.RunCompleted{Output: json.RawMessage(`"done"`)}}
	// noHandler: u1 rejected by code that registered no handler for it.
	noHandler := []event.Payload{scheduled(stepSpec("charge", "charge", `1`)), received("u1", 5),
		&event.UpdateRejected{UpdateID: "u1", Error: event.ErrorInfo{Kind: core.UpdateNoHandler, Message: `workflow "order" registers no update handler for "add"`}}}

	cases := []struct {
		name     string
		history  []event.Payload
		validate func(int) *event.ErrorInfo
		complete func(int) json.RawMessage
		// noHandlers replays with code that registers no update handler at all.
		noHandlers bool
		// field, when set, is the field of the non-determinism error replay must return.
		field string
	}{
		{name: "the validator that judged the history", history: judged, validate: positiveOnly},
		{name: "a validator that rejects what history accepted and accepts what it rejected", history: judged, validate: inverted},
		{name: "a validator that rejects everything", history: judged, validate: rejectAll},
		{name: "code that no longer handles the update: the recorded acceptance stands", history: judged, noHandlers: true},
		{name: "a handler registered since a rejection for want of one", history: noHandler},
		{name: "an at-once completion after a validator that now rejects", history: atOnce, validate: rejectAll, complete: double},
		{name: "an at-once completion with another result is still non-deterministic", history: atOnce, validate: rejectAll, complete: triple, field: "result"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(t, "run-1", event.Spec{}).add(tc.history...)
			require.Empty(t, core.Check("run-1", h.envs))
			var validated []string
			var d core.Decider = updating{script{fn: stepThenComplete}, verdicts{tc.validate, tc.complete, &validated}.decide}
			if tc.noHandlers {
				d = script{fn: stepThenComplete}
			}
			s, err := core.Replay("run-1", h.envs, d, core.DecideOptions{})
			if tc.field != "" {
				var nd *core.NonDeterminismError
				require.ErrorAs(t, err, &nd)
				require.Equal(t, "update", nd.Kind)
				require.Equal(t, tc.field, nd.Field, nd.Error())
				require.Empty(t, validated, "replay validated updates whose verdict history records")
				return
			}
			require.NoError(t, err)
			require.Empty(t, validated, "replay validated updates whose verdict history records")
			want := h.snapshot()
			for id, u := range want.Updates {
				require.Equal(t, u.Status, s.Updates[id].Status, id)
				require.Equal(t, u.Error, s.Updates[id].Error, id)
			}
		})
	}

	t.Run("an update without a recorded verdict meets the validator deployed now", func(t *testing.T) {
		h := newHistory(t, "run-1", event.Spec{}).add(judged[:5]...).add(received("u3", 4))
		var validated []string
		d := updating{script{fn: stepThenComplete}, verdicts{validate: inverted, validated: &validated}.decide}
		s, err := core.Replay("run-1", h.envs, d, core.DecideOptions{})
		require.NoError(t, err)
		require.Empty(t, validated)
		v, err := core.Decide(s, d, core.DecideOptions{})
		require.NoError(t, err)
		require.Equal(t, []string{"u3"}, validated)
		require.Equal(t, []event.Payload{&event.UpdateRejected{UpdateID: "u3", Error: event.ErrorInfo{Kind: "closed", Message: "deposits are closed"}}}, v.Events)
	})
}

func TestCheckUpdateIdentity(t *testing.T) {
	rec := func(id string) *event.UpdateReceived {
		return &event.UpdateReceived{UpdateID: id, Name: "add", Payload: json.RawMessage(`1`)}
	}
	cases := []struct {
		name   string
		events []event.Payload
		rule   string
	}{
		{"update ID received twice", []event.Payload{rec("u1"), rec("u1")}, "duplicate_delivery"},
		{"accepted without being received", []event.Payload{&event.UpdateAccepted{UpdateID: "u1"}}, "unknown_id"},
		{"accepted twice", []event.Payload{rec("u1"), &event.UpdateAccepted{UpdateID: "u1"}, &event.UpdateAccepted{UpdateID: "u1"}}, "duplicate_id"},
		{"rejected after acceptance", []event.Payload{rec("u1"), &event.UpdateAccepted{UpdateID: "u1"},
			&event.UpdateRejected{UpdateID: "u1", Error: event.ErrorInfo{Message: "x"}}}, "duplicate_id"},
		{"judged out of order", []event.Payload{rec("u1"), rec("u2"), &event.UpdateAccepted{UpdateID: "u2"}}, "update_order"},
		{"completed before acceptance", []event.Payload{rec("u1"), &event.UpdateCompleted{UpdateID: "u1", Result: json.RawMessage(`1`)}}, "update_state"},
		{"completed twice", []event.Payload{rec("u1"), &event.UpdateAccepted{UpdateID: "u1"},
			&event.UpdateCompleted{UpdateID: "u1", Result: json.RawMessage(`1`)}, &event.UpdateCompleted{UpdateID: "u1", Result: json.RawMessage(`1`)}}, "duplicate_id"},
		{"completion of a rejected update", []event.Payload{rec("u1"), &event.UpdateRejected{UpdateID: "u1", Error: event.ErrorInfo{Message: "x"}},
			&event.UpdateCompleted{UpdateID: "u1", Result: json.RawMessage(`1`)}}, "duplicate_id"},
		{"completion with both a result and an error", []event.Payload{rec("u1"), &event.UpdateAccepted{UpdateID: "u1"},
			&event.UpdateCompleted{UpdateID: "u1", Result: json.RawMessage(`1`), Error: &event.ErrorInfo{Message: "x"}}}, "malformed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(t, "run-1", event.Spec{}).add(tc.events...)
			vs := core.Check("run-1", h.envs)
			require.Len(t, vs, 1, "%v", vs)
			require.Equal(t, tc.rule, vs[0].Rule)
			require.Equal(t, uint64(len(h.envs)), vs[0].Seq)
		})
	}
	// A valid history of updates has no violation, and its snapshot says how each ended.
	h := newHistory(t, "run-1", event.Spec{}).add(rec("u1"), rec("u2"), &event.UpdateAccepted{UpdateID: "u1"},
		&event.UpdateRejected{UpdateID: "u2", Error: event.ErrorInfo{Message: "x"}}, &event.UpdateCompleted{UpdateID: "u1", Result: json.RawMessage(`3`)})
	require.Empty(t, core.Check("run-1", h.envs))
	s := h.snapshot()
	require.Equal(t, core.UpdateCompleted, s.Updates["u1"].Status)
	require.Equal(t, core.UpdateRejected, s.Updates["u2"].Status)
}
