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

// cancelHistory: step "run" has attempt 1 in flight, step "wait" waits out a retry backoff,
// step "done" completed, child "kid" runs, wait "nap" is pending.
func cancelHistory(t *testing.T) *history {
	h := newHistory(t, "r", event.Spec{})
	h.add(scheduled(stepSpec("run", "a", `1`), stepSpec("wait", "a", `2`), stepSpec("done", "a", `3`)),
		&event.StepFailed{StepID: "wait", Attempt: 1, Error: event.ErrorInfo{Kind: "flaky", Message: "x"}, Retryable: true},
		&event.StepRetryScheduled{StepID: "wait", Attempt: 2, Due: epoch.Add(time.Hour)},
		&event.StepCompleted{StepID: "done", Attempt: 1, Output: json.RawMessage(`"ok"`)},
		&event.ChildScheduled{Children: []event.ChildSpec{{ChildID: "kid", RunID: "r=kid", Definition: "sub", Input: json.RawMessage(`null`), CancelPolicy: event.CancelPolicyRequest}}},
		&event.WaitScheduled{WaitID: "nap", Deadline: epoch.Add(time.Hour)})
	return h
}

func TestCancelStepPolicies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		step   string
		policy event.Cancellation
		// want is the appended event types; unknown the side_effect_unknown recorded.
		want    []event.Type
		unknown bool
		settled bool
	}{
		{"run", event.CancelTry, []event.Type{event.TypeStepCancelled}, true, true},
		{"run", event.CancelWait, []event.Type{event.TypeStepCancelRequested}, false, false},
		{"run", event.CancelAbandon, []event.Type{event.TypeStepCancelled}, true, true},
		{"wait", event.CancelTry, []event.Type{event.TypeStepCancelled}, false, true},
		{"wait", event.CancelWait, []event.Type{event.TypeStepCancelRequested, event.TypeStepCancelled}, false, true},
		{"wait", event.CancelAbandon, []event.Type{event.TypeStepCancelled}, false, true},
	}
	for _, c := range cases {
		t.Run(c.step+"/"+string(c.policy), func(t *testing.T) {
			h := cancelHistory(t)
			s := h.snapshot()
			v, err := core.Validate(s, core.CancelStep{ID: c.step, Policy: c.policy})
			require.NoError(t, err)
			var got []event.Type
			for _, p := range v.Events {
				got = append(got, p.EventType())
			}
			require.Equal(t, c.want, got)
			if sc, ok := v.Events[len(v.Events)-1].(*event.StepCancelled); ok {
				require.Equal(t, c.unknown, sc.Steps[0].SideEffectUnknown)
				require.Equal(t, c.policy, sc.Cancellation)
				require.Equal(t, event.CauseWorkflow, sc.Cause)
			}
			h.add(v.Events...)
			require.Empty(t, core.Check("r", h.envs))
			s = h.snapshot()
			st := s.Steps[c.step]
			require.Equal(t, c.settled, st.Status.Settled())
			require.Equal(t, c.policy, st.Cancellation)
			require.Equal(t, !c.settled, st.CancelPending())
			if c.step == "wait" {
				// The retry timer is moot.
				require.Contains(t, core.Derive(s, h.envs[len(h.envs)-len(v.Events):]).Moot,
					core.Timer{RunID: "r", Kind: core.TimerRetry, ID: "wait", Attempt: 2})
				_, err := core.Fire(s, core.Timer{RunID: "r", Kind: core.TimerRetry, ID: "wait", Attempt: 2})
				require.ErrorIs(t, err, core.ErrStale)
			}

			// Re-issued: pending waits, settled is refused, another policy is non-determinism.
			v, err = core.Validate(s, core.CancelStep{ID: c.step, Policy: c.policy})
			if c.settled {
				var inv *core.InvalidDecisionError
				require.ErrorAs(t, err, &inv)
				require.Equal(t, core.CodeAlreadySettled, inv.Code)
			} else {
				require.NoError(t, err)
				require.True(t, v.Waiting())
			}
			other := event.CancelAbandon
			if c.policy == other {
				other = event.CancelTry
			}
			_, err = core.Validate(s, core.CancelStep{ID: c.step, Policy: other})
			var nd *core.NonDeterminismError
			require.ErrorAs(t, err, &nd)
			require.Equal(t, "cancel_policy", nd.Field)
			require.Equal(t, c.step, nd.ID)
			require.Equal(t, uint64(len(h.envs)-len(got)+1), nd.Seq)
		})
	}
}

// TestCancelWaitAttemptEnd: how the end of an attempt asked to cancel (wait_cancelled) settles
// its step.
func TestCancelWaitAttemptEnd(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		out  core.StepOutcome
		want event.Type
	}{
		{"reported cancelled", core.StepOutcome{Err: &event.ErrorInfo{Kind: "error", Message: "context canceled"}}, event.TypeStepCancelled},
		{"failed", core.StepOutcome{Err: &event.ErrorInfo{Kind: "flaky", Message: "boom"}}, event.TypeStepCancelled},
		{"non-retryable", core.StepOutcome{Err: &event.ErrorInfo{Kind: "fatal", Message: "boom"}, NonRetryable: true}, event.TypeStepCancelled},
		{"completed anyway", core.StepOutcome{Output: json.RawMessage(`"done"`)}, event.TypeStepCompleted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := cancelHistory(t)
			h.add(&event.StepCancelRequested{StepID: "run", Attempt: 1, Policy: event.CancelWait})
			s := h.snapshot()
			require.True(t, s.CancelAsked("run", 1))
			require.True(t, s.StepCancelsPending())
			evs, err := core.StepResult(s, "run", 1, c.out, h.now)
			require.NoError(t, err)
			require.Len(t, evs, 1, "never a retry")
			require.Equal(t, c.want, evs[0].EventType())
			if sc, ok := evs[0].(*event.StepCancelled); ok {
				require.Equal(t, event.CancelWait, sc.Cancellation)
				require.False(t, sc.Steps[0].SideEffectUnknown)
			}
			h.add(evs...)
			require.Empty(t, core.Check("r", h.envs))
			require.False(t, h.snapshot().StepCancelsPending())
			// The workflow's re-issued CancelStep is done now.
			_, err = core.Validate(h.snapshot(), core.CancelStep{ID: "run", Policy: event.CancelWait})
			require.ErrorIs(t, err, core.ErrInvalidDecision)
		})
	}
	t.Run("not running anywhere", func(t *testing.T) {
		h := cancelHistory(t)
		h.add(&event.StepCancelRequested{StepID: "run", Attempt: 1, Policy: event.CancelWait})
		evs, err := core.CancelUnrun(h.snapshot(), "run", 1)
		require.NoError(t, err)
		sc := evs[0].(*event.StepCancelled)
		require.True(t, sc.Steps[0].SideEffectUnknown, "it may have run before its worker went")
		h.add(evs...)
		require.Empty(t, core.Check("r", h.envs))
		_, err = core.CancelUnrun(h.snapshot(), "run", 1)
		require.ErrorIs(t, err, core.ErrStale)
	})
	t.Run("abandoned result ignored", func(t *testing.T) {
		h := cancelHistory(t)
		h.add(&event.StepCancelled{Steps: []event.CancelledStep{{StepID: "run", Attempt: 1, SideEffectUnknown: true}}, Cause: event.CauseWorkflow, Cancellation: event.CancelAbandon})
		s := h.snapshot()
		require.True(t, s.Detached("run"))
		_, err := core.StepResult(s, "run", 1, core.StepOutcome{Output: json.RawMessage(`1`)}, h.now)
		require.ErrorIs(t, err, core.ErrStale)
	})
}

func TestCancelChildPolicies(t *testing.T) {
	t.Parallel()
	for _, policy := range []event.Cancellation{event.CancelTry, event.CancelWait, event.CancelAbandon} {
		t.Run(string(policy), func(t *testing.T) {
			h := cancelHistory(t)
			v, err := core.Validate(h.snapshot(), core.CancelChild{ID: "kid", Policy: policy})
			require.NoError(t, err)
			require.Len(t, v.Events, 1)
			h.add(v.Events...)
			require.Empty(t, core.Check("r", h.envs))
			s := h.snapshot()
			c := core.Derive(s, h.envs[len(h.envs)-1:])
			kid := s.Children["kid"]
			switch policy {
			case event.CancelTry:
				require.True(t, kid.Settled)
				require.Equal(t, event.OutcomeCancelled, kid.Outcome)
				require.Equal(t, []core.CancelRun{{RunID: "r=kid", Reason: `child "kid" cancelled by the workflow (try_cancel)`}}, c.CancelRuns)
				require.False(t, c.Resume, "the workflow's own decision settled it")
			case event.CancelAbandon:
				require.True(t, kid.Settled)
				require.Empty(t, c.CancelRuns, "an abandoned child is not told")
			case event.CancelWait:
				require.False(t, kid.Settled)
				require.True(t, kid.CancelPending())
				require.Equal(t, []core.CancelRun{{RunID: "r=kid", Reason: `child "kid" cancelled by the workflow (wait_cancelled)`}}, c.CancelRuns)
				v, err := core.Validate(s, core.CancelChild{ID: "kid", Policy: policy})
				require.NoError(t, err)
				require.True(t, v.Waiting())
			}
			// The child's run ends (cancelled, as asked): only wait_cancelled settles by it.
			ended := &core.Snapshot{RunID: "r=kid", Parent: &event.ParentRef{RunID: "r", ChildID: "kid"},
				Outcome: &core.Outcome{Outcome: event.OutcomeCancelled, Reason: "asked", Time: h.now}}
			evs, err := core.SettleChild(s, "kid", ended)
			if policy != event.CancelWait {
				require.ErrorIs(t, err, core.ErrStale)
				return
			}
			require.NoError(t, err)
			h.add(evs...)
			require.Empty(t, core.Check("r", h.envs))
			s = h.snapshot()
			require.Equal(t, event.OutcomeCancelled, s.Children["kid"].Outcome)
			require.Empty(t, core.Derive(s, h.envs[len(h.envs)-2:len(h.envs)-1]).CancelRuns, "its run ended: nothing to cancel")
		})
	}
}

func TestCancelInvalidTargets(t *testing.T) {
	t.Parallel()
	s := cancelHistory(t).snapshot()
	cases := []struct {
		d    core.Decision
		code string
		msg  string
	}{
		{core.CancelStep{ID: "ghost", Policy: event.CancelTry}, core.CodeInvalidDecision, `the run has no step "ghost"`},
		{core.CancelStep{ID: "nap", Policy: event.CancelTry}, core.CodeInvalidDecision, `"nap" is a wait of this run, not a step`},
		{core.CancelStep{ID: "kid", Policy: event.CancelTry}, core.CodeInvalidDecision, `"kid" is a child of this run, not a step`},
		{core.CancelStep{ID: "run", Policy: "request_cancel"}, core.CodeInvalidDecision, "policy must be try_cancel, wait_cancelled or abandon"},
		{core.CancelStep{ID: "run"}, core.CodeInvalidDecision, "policy must be"},
		{core.CancelStep{ID: "9lives", Policy: event.CancelTry}, core.CodeInvalidDecision, "must start with a letter"},
		{core.CancelStep{ID: "done", Policy: event.CancelTry}, core.CodeAlreadySettled, `step "done" already completed`},
		{core.CancelChild{ID: "run", Policy: event.CancelTry}, core.CodeInvalidDecision, `"run" is a step of this run, not a child`},
		{core.CancelChild{ID: "nobody", Policy: event.CancelWait}, core.CodeInvalidDecision, `the run has no child "nobody"`},
		{core.CancelChild{ID: "kid", Policy: "later"}, core.CodeInvalidDecision, "policy must be"},
	}
	for _, c := range cases {
		_, err := core.Validate(s, c.d)
		var inv *core.InvalidDecisionError
		require.ErrorAs(t, err, &inv, "%s", c.d.Describe())
		require.Equal(t, c.code, inv.Code, "%s", c.d.Describe())
		require.Contains(t, inv.Detail, c.msg)
	}
}

// TestCancelReplay: replaying a history whose workflow cancelled a step or a child against code
// that cancels with another policy, or another target, is a non-determinism error naming the field.
func TestCancelReplay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		recorded core.Decision
		replayed core.Decision
		field    string
	}{
		{"step policy", core.CancelStep{ID: "a", Policy: event.CancelTry}, core.CancelStep{ID: "a", Policy: event.CancelAbandon}, "cancel_policy"},
		{"step wait to try", core.CancelStep{ID: "a", Policy: event.CancelWait}, core.CancelStep{ID: "a", Policy: event.CancelTry}, "cancel_policy"},
		{"step target", core.CancelStep{ID: "a", Policy: event.CancelTry}, core.CancelStep{ID: "b", Policy: event.CancelTry}, "step_id"},
		{"child policy", core.CancelChild{ID: "kid", Policy: event.CancelWait}, core.CancelChild{ID: "kid", Policy: event.CancelAbandon}, "cancel_policy"},
		{"child try to abandon", core.CancelChild{ID: "kid", Policy: event.CancelTry}, core.CancelChild{ID: "kid", Policy: event.CancelAbandon}, "cancel_policy"},
		{"same", core.CancelStep{ID: "a", Policy: event.CancelWait}, core.CancelStep{ID: "a", Policy: event.CancelWait}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code := func(cancel core.Decision) script {
				return script{fn: func(s *core.Snapshot) core.Decision {
					if s.Steps["a"] == nil {
						return core.ScheduleSteps{Steps: []core.StepCall{call("a", "a", `1`), call("b", "b", `2`)}}
					}
					if s.Children["kid"] == nil {
						return core.StartChildren{Children: []core.ChildCall{{ID: "kid", Definition: "sub", Input: json.RawMessage(`null`)}}}
					}
					if s.Waits["nap"] == nil {
						return core.Sleep{ID: "nap", Duration: time.Hour}
					}
					return cancel
				}}
			}
			// Record the history by deciding with the recorded code.
			h := newHistory(t, "r", event.Spec{})
			for range 4 {
				v, err := core.Decide(h.snapshot(), code(c.recorded), core.DecideOptions{})
				require.NoError(t, err)
				if v.Waiting() {
					break
				}
				h.add(v.Events...)
			}
			require.Empty(t, core.Check("r", h.envs))
			_, err := core.Replay("r", h.envs, code(c.replayed), core.DecideOptions{})
			if c.field == "" {
				require.NoError(t, err)
				return
			}
			var nd *core.NonDeterminismError
			require.ErrorAs(t, err, &nd)
			require.Equal(t, c.field, nd.Field)
			require.Equal(t, uint64(5), nd.Seq, "the cancellation's event")
		})
	}
}

// TestChildRetryCore: a child run that fails under a retry policy is started again as a new
// run after the backoff, and the parent sees child.settled only after the last attempt.
func TestChildRetryCore(t *testing.T) {
	t.Parallel()
	retry := event.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second, NonRetryable: []string{"fatal"}}
	start := func(t *testing.T) *history {
		h := newHistory(t, "p", event.Spec{})
		v, err := core.Validate(h.snapshot(), core.StartChildren{Children: []core.ChildCall{{ID: "kid", Definition: "sub", Input: json.RawMessage(`1`), Retry: &retry}}})
		require.NoError(t, err)
		spec := v.Events[0].(*event.ChildScheduled).Children[0]
		require.Equal(t, retry.Normalize(), *spec.Retry, "recorded normalized")
		return h.add(v.Events...)
	}
	end := func(s *core.Snapshot, runID string, attempt int, kind string, at time.Time) *core.Snapshot {
		o := &core.Outcome{Outcome: event.OutcomeFailed, Error: &event.ErrorInfo{Kind: kind, Message: "boom"}, Time: at}
		if kind == "" {
			o = &core.Outcome{Outcome: event.OutcomeCompleted, Output: json.RawMessage(`"ok"`), Time: at}
		}
		return &core.Snapshot{RunID: runID, Parent: &event.ParentRef{RunID: s.RunID, ChildID: "kid", Attempt: attempt}, Outcome: o}
	}

	t.Run("fails then succeeds", func(t *testing.T) {
		h := start(t)
		s := h.snapshot()
		evs, err := core.SettleChild(s, "kid", end(s, "p=kid", 0, "flaky", h.now))
		require.NoError(t, err)
		rs := evs[0].(*event.ChildRetryScheduled)
		require.Equal(t, &event.ChildRetryScheduled{ChildID: "kid", Attempt: 2, RunID: "p=kid=_2", Due: h.now.Add(time.Second),
			FailedRunID: "p=kid", Error: event.ErrorInfo{Kind: "flaky", Message: "boom"}}, rs)
		h.add(evs...)
		s = h.snapshot()
		require.False(t, s.Children["kid"].Settled, "the parent waits for the last attempt")
		c := core.Derive(s, h.envs[len(h.envs)-1:])
		timer := core.Timer{RunID: "p", Kind: core.TimerChildRetry, ID: "kid", Attempt: 2, Due: rs.Due, Seq: uint64(len(h.envs))}
		require.Equal(t, []core.Timer{timer}, c.Timers)
		require.Equal(t, []core.Timer{timer}, core.Timers(s))
		require.False(t, c.Resume, "nothing to decide")
		require.Equal(t, "child_retry.kid.2", timer.Key())
		// A redelivered notice of the first run's end is stale.
		_, err = core.SettleChild(s, "kid", end(s, "p=kid", 0, "flaky", h.now))
		require.ErrorIs(t, err, core.ErrStale)

		fired, err := core.Fire(s, timer)
		require.NoError(t, err)
		require.Equal(t, []event.Payload{&event.ChildRetryFired{ChildID: "kid", Attempt: 2, RunID: "p=kid=_2"}}, fired)
		h.add(fired...)
		s = h.snapshot()
		c = core.Derive(s, h.envs[len(h.envs)-1:])
		require.Len(t, c.Children, 1)
		require.Equal(t, "p=kid=_2", c.Children[0].RunID)
		require.Equal(t, 2, core.ChildAttempt(s, "kid", "p=kid=_2"))
		_, err = core.Fire(s, timer)
		require.ErrorIs(t, err, core.ErrStale)

		evs, err = core.SettleChild(s, "kid", end(s, "p=kid=_2", 2, "", h.now))
		require.NoError(t, err)
		settled := evs[0].(*event.ChildSettled)
		require.Equal(t, "p=kid=_2", settled.RunID)
		require.Equal(t, event.OutcomeCompleted, settled.Outcome)
		h.add(evs...)
		require.Empty(t, core.Check("p", h.envs))
	})

	t.Run("exhausted", func(t *testing.T) {
		h := start(t)
		for attempt := 1; attempt <= 3; attempt++ {
			s := h.snapshot()
			run := event.ChildAttemptRunID("p=kid", attempt)
			evs, err := core.SettleChild(s, "kid", end(s, run, attempt, "flaky", h.now))
			require.NoError(t, err)
			h.add(evs...)
			if attempt < 3 {
				fired, err := core.Fire(h.snapshot(), core.Timer{RunID: "p", Kind: core.TimerChildRetry, ID: "kid", Attempt: attempt + 1})
				require.NoError(t, err)
				h.add(fired...)
			}
		}
		s := h.snapshot()
		require.True(t, s.Children["kid"].Settled)
		require.Equal(t, event.OutcomeFailed, s.Children["kid"].Outcome)
		require.Equal(t, "p=kid=_3", s.Children["kid"].EndedRunID)
		require.Empty(t, core.Check("p", h.envs))
	})

	t.Run("non-retryable", func(t *testing.T) {
		h := start(t)
		s := h.snapshot()
		evs, err := core.SettleChild(s, "kid", end(s, "p=kid", 0, "fatal", h.now))
		require.NoError(t, err)
		require.IsType(t, &event.ChildSettled{}, evs[0])
	})

	t.Run("cancel pending: no retry", func(t *testing.T) {
		h := start(t)
		v, err := core.Validate(h.snapshot(), core.CancelChild{ID: "kid", Policy: event.CancelWait})
		require.NoError(t, err)
		h.add(v.Events...)
		s := h.snapshot()
		evs, err := core.SettleChild(s, "kid", end(s, "p=kid", 0, "flaky", h.now))
		require.NoError(t, err)
		require.IsType(t, &event.ChildSettled{}, evs[0])
	})

	t.Run("cancelled during the backoff", func(t *testing.T) {
		for _, policy := range []event.Cancellation{event.CancelTry, event.CancelWait, event.CancelAbandon} {
			h := start(t)
			s := h.snapshot()
			evs, err := core.SettleChild(s, "kid", end(s, "p=kid", 0, "flaky", h.now))
			require.NoError(t, err)
			h.add(evs...)
			v, err := core.Validate(h.snapshot(), core.CancelChild{ID: "kid", Policy: policy})
			require.NoError(t, err)
			h.add(v.Events...)
			require.Empty(t, core.Check("p", h.envs), "%s", policy)
			s = h.snapshot()
			require.True(t, s.Children["kid"].Settled, "%s: no run of it runs: settled at once", policy)
			c := core.Derive(s, h.envs[len(h.envs)-len(v.Events):])
			require.Contains(t, c.Moot, core.Timer{RunID: "p", Kind: core.TimerChildRetry, ID: "kid", Attempt: 2})
			for _, r := range c.CancelRuns {
				require.Equal(t, "p=kid", r.RunID, "%s: only the run that ended is named; the next one never started", policy)
			}
			_, err = core.Fire(s, core.Timer{RunID: "p", Kind: core.TimerChildRetry, ID: "kid", Attempt: 2})
			require.ErrorIs(t, err, core.ErrStale)
		}
	})

	t.Run("replay compares the policy", func(t *testing.T) {
		h := start(t)
		other := retry
		other.MaxAttempts = 5
		_, err := core.Validate(h.snapshot(), core.StartChildren{Children: []core.ChildCall{{ID: "kid", Definition: "sub", Input: json.RawMessage(`1`), Retry: &other}}})
		var nd *core.NonDeterminismError
		require.ErrorAs(t, err, &nd)
		require.Equal(t, "retry", nd.Field)
		_, err = core.Validate(h.snapshot(), core.StartChildren{Children: []core.ChildCall{{ID: "kid", Definition: "sub", Input: json.RawMessage(`1`)}}})
		require.ErrorAs(t, err, &nd)
		require.Equal(t, "retry", nd.Field)
		v, err := core.Validate(h.snapshot(), core.StartChildren{Children: []core.ChildCall{{ID: "kid", Definition: "sub", Input: json.RawMessage(`1`), Retry: &retry}}})
		require.NoError(t, err)
		require.True(t, v.Waiting())
	})
}

// TestCheckCancelRules: the checker reports cancellation and child retry events out of order.
func TestCheckCancelRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		add  []event.Payload
		rule string
	}{
		{"wait settle without request", []event.Payload{&event.StepCancelled{Steps: []event.CancelledStep{{StepID: "run", Attempt: 1}}, Cause: event.CauseWorkflow, Cancellation: event.CancelWait}}, "cancel_order"},
		{"request twice", []event.Payload{&event.StepCancelRequested{StepID: "run", Attempt: 1, Policy: event.CancelWait}, &event.StepCancelRequested{StepID: "run", Attempt: 1, Policy: event.CancelWait}}, "cancel_state"},
		{"request for a settled step", []event.Payload{&event.StepCancelRequested{StepID: "done", Attempt: 1, Policy: event.CancelWait}}, "step_state"},
		{"request try_cancel", []event.Payload{&event.StepCancelRequested{StepID: "run", Attempt: 1, Policy: event.CancelTry}}, "cancel_state"},
		{"retry after request", []event.Payload{&event.StepCancelRequested{StepID: "run", Attempt: 1, Policy: event.CancelWait},
			&event.StepFailed{StepID: "run", Attempt: 1, Error: event.ErrorInfo{Message: "x"}, Retryable: true}}, "cancel_state"},
		{"unknown step", []event.Payload{&event.StepCancelRequested{StepID: "ghost", Attempt: 1, Policy: event.CancelWait}}, "unknown_id"},
		{"child request names another run", []event.Payload{&event.ChildCancelRequested{ChildID: "kid", RunID: "r=other", Policy: event.CancelWait}}, "child_state"},
		{"child settled by wait without request", []event.Payload{&event.ChildSettled{ChildID: "kid", RunID: "r=kid", Outcome: event.OutcomeCancelled, Cancellation: event.CancelWait}}, "cancel_order"},
		{"child retry without policy", []event.Payload{&event.ChildRetryScheduled{ChildID: "kid", Attempt: 2, RunID: "r=kid=_2", Due: epoch, FailedRunID: "r=kid", Error: event.ErrorInfo{Message: "x"}}}, "retry_order"},
		{"child retry fired unscheduled", []event.Payload{&event.ChildRetryFired{ChildID: "kid", Attempt: 2, RunID: "r=kid=_2"}}, "child_state"},
	}
	for _, c := range cases {
		h := cancelHistory(t)
		h.add(c.add...)
		vs := core.Check("r", h.envs)
		require.NotEmpty(t, vs, c.name)
		require.Equal(t, c.rule, vs[0].Rule, "%s: %v", c.name, vs)
	}
}

func TestChildAttemptRunID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "p=kid", event.ChildAttemptRunID("p=kid", 1))
	require.Equal(t, "p=kid=_3", event.ChildAttemptRunID("p=kid", 3))
	require.NoError(t, event.ValidateDerivedRunID("p=kid=_3"))
	// A continuation of a retried child is not mistaken for another generation.
	require.Equal(t, "p=kid=_3=1", event.SuccessorRunID("p=kid=_3", 1))
	require.Equal(t, "p=kid=_3=2", event.SuccessorRunID("p=kid=_3=1", 2))
	require.False(t, errors.Is(event.ValidateID("child", "_3"), nil), "no child ID looks like an attempt suffix")
}

func TestAttemptCancelled(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		add  []event.Payload
		want bool
	}{
		{"in flight", nil, false},
		{"try_cancel", []event.Payload{&event.StepCancelled{Steps: []event.CancelledStep{{StepID: "run", Attempt: 1, SideEffectUnknown: true}}, Cause: event.CauseWorkflow, Cancellation: event.CancelTry}}, true},
		{"wait_cancelled", []event.Payload{&event.StepCancelRequested{StepID: "run", Attempt: 1, Policy: event.CancelWait}}, true},
		{"abandon", []event.Payload{&event.StepCancelled{Steps: []event.CancelledStep{{StepID: "run", Attempt: 1, SideEffectUnknown: true}}, Cause: event.CauseWorkflow, Cancellation: event.CancelAbandon}}, false},
		{"run ended", []event.Payload{&event.StepCancelled{Steps: []event.CancelledStep{{StepID: "run", Attempt: 1, SideEffectUnknown: true}, {StepID: "wait", Attempt: 2}}, Cause: event.CauseWorkflow},
			&event.RunCompleted{Output: json.RawMessage(`1`)}}, true},
		{"completed elsewhere", []event.Payload{&event.StepCompleted{StepID: "run", Attempt: 1, Output: json.RawMessage(`1`)}}, true},
	}
	for _, c := range cases {
		h := cancelHistory(t)
		h.add(c.add...)
		require.Empty(t, core.Check("r", h.envs), c.name)
		require.Equal(t, c.want, h.snapshot().AttemptCancelled("run", 1), c.name)
	}
}
