package core_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// pauseWorkflow is workflow code that schedules step "work" and completes with its output.
func pauseWorkflow(asked *int) script {
	return script{fn: func(s *core.Snapshot) core.Decision {
		*asked++
		if st := s.Steps["work"]; st != nil && st.Status == core.StepCompleted {
			return core.Complete{Output: st.Output}
		}
		return core.ScheduleSteps{Steps: []core.StepCall{call("work", "work", `1`)}}
	}}
}

func TestPausedRunDecidesNothing(t *testing.T) {
	t.Parallel()
	asked := 0
	code := pauseWorkflow(&asked)
	h := newHistory(t, "p", event.Spec{})
	h.add(scheduled(stepSpec("work", "work", `1`)))
	s := h.snapshot()
	ps, err := core.PauseRun(s, "maintenance", "ann", "req-1")
	require.NoError(t, err)
	h.add(ps...)
	s = h.snapshot()
	require.Equal(t, core.StatusPaused, s.Status)
	require.True(t, s.IsPaused())
	require.Equal(t, "paused by ann: maintenance", s.Summary().Detail)

	for name, tc := range map[string]struct {
		input func(s *core.Snapshot) ([]event.Payload, error)
	}{
		"signal": {func(s *core.Snapshot) ([]event.Payload, error) {
			return core.ReceiveSignal(s, "go", json.RawMessage(`1`), "d1")
		}},
		"cancel":   {func(s *core.Snapshot) ([]event.Payload, error) { return core.RequestCancel(s, "no") }},
		"repeated": {func(s *core.Snapshot) ([]event.Payload, error) { return core.PauseRun(s, "again", "bob", "req-2") }},
		"result": {func(s *core.Snapshot) ([]event.Payload, error) {
			return core.StepResult(s, "work", 1, core.StepOutcome{Err: &event.ErrorInfo{Kind: "io", Message: "reset"}}, h.now)
		}},
	} {
		t.Run(name, func(t *testing.T) {
			s := h.snapshot()
			ps, err := tc.input(s)
			if name == "repeated" {
				require.ErrorIs(t, err, core.ErrDuplicate, "a paused run is paused once")
				return
			}
			require.NoError(t, err)
			hh := &history{t: t, run: h.run, now: h.now, envs: append([]event.Envelope(nil), h.envs...)}
			hh.add(ps...)
			s = hh.snapshot()
			require.Equal(t, core.StatusPaused, s.Status, "inputs are recorded; the run stays paused")
			before := asked
			v, err := core.Decide(s, code, core.DecideOptions{})
			require.NoError(t, err)
			require.True(t, v.Waiting())
			require.Contains(t, v.WaitingOn, "unpause")
			require.Equal(t, before, asked, "the code of a paused run is never asked")
			// Nothing resumes the run for an input while it is paused.
			require.False(t, core.Derive(s, hh.envs[len(h.envs):]).Resume)
		})
	}

	// A timer fires and a retry fires while paused; the attempt it makes due is not started by
	// the core either (InFlight lists it; the engine holds it, see internal/engine).
	ps, err = core.StepResult(h.snapshot(), "work", 1, core.StepOutcome{Err: &event.ErrorInfo{Kind: "io", Message: "reset"}}, h.now)
	require.NoError(t, err)
	h.add(ps...)
	retry := ps[1].(*event.StepRetryScheduled)
	ps, err = core.Fire(h.snapshot(), core.Timer{RunID: "p", Kind: core.TimerRetry, ID: "work", Attempt: 2, Due: retry.Due})
	require.NoError(t, err)
	h.add(ps...)
	s = h.snapshot()
	require.Equal(t, core.StatusPaused, s.Status)
	require.Equal(t, []string{"work"}, s.InFlight())

	// Unpausing: the request with an ID seen is a duplicate; a new one unpauses, and its commit
	// is an input that resumes the run.
	_, err = core.UnpauseRun(s, "", "ann", "req-1", h.now)
	require.ErrorIs(t, err, core.ErrDuplicate)
	ps, err = core.UnpauseRun(s, "done", "ann", "req-3", h.now)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	first := len(h.envs)
	h.add(ps...)
	s = h.snapshot()
	require.Equal(t, core.StatusRunning, s.Status)
	require.Nil(t, s.Paused)
	d := core.Derive(s, h.envs[first:])
	require.True(t, d.Resume)
	require.Equal(t, s.Seq, d.TaskSeq)
	_, err = core.UnpauseRun(s, "", "ann", "req-4", h.now)
	require.ErrorIs(t, err, core.ErrDuplicate, "a run that is not paused is unpaused without effect")
	_, err = core.PauseRun(s, "", "ann", "req-1")
	require.ErrorIs(t, err, core.ErrDuplicate, "a late retry of the first pause request is applied once")
}

func TestPauseHistoryRules(t *testing.T) {
	t.Parallel()
	fail := &event.ErrorInfo{Kind: "bug", Message: "nil map"}
	for name, tc := range map[string]struct {
		events []event.Payload
		rule   string
	}{
		"decision while paused": {[]event.Payload{&event.RunPaused{Cause: event.PauseOperator}, scheduled(stepSpec("a", "a", `1`))}, "paused"},
		"decision.failed while paused": {[]event.Payload{&event.RunPaused{Cause: event.PauseOperator},
			&event.DecisionFailed{Kind: "panic", Detail: "boom"}}, "paused"},
		"paused twice":      {[]event.Payload{&event.RunPaused{Cause: event.PauseOperator}, &event.RunPaused{Cause: event.PauseOperator}}, "pause_state"},
		"unpaused unpaused": {[]event.Payload{&event.RunUnpaused{}}, "pause_state"},
		"same delivery": {[]event.Payload{&event.RunPaused{Cause: event.PauseOperator, DeliveryID: "x"},
			&event.RunUnpaused{DeliveryID: "x"}}, "duplicate_delivery"},
		"exhausted without failure": {[]event.Payload{scheduled(stepSpec("a", "a", `1`)),
			&event.RunPaused{Cause: event.PauseStepExhausted, StepID: "a", Attempt: 1, Error: fail}}, "retry_order"},
		"retry of a held step while paused": {[]event.Payload{scheduled(stepSpec("a", "a", `1`)),
			&event.StepFailed{StepID: "a", Attempt: 1, Error: *fail, Retryable: true},
			&event.RunPaused{Cause: event.PauseStepExhausted, StepID: "a", Attempt: 1, Error: fail},
			&event.StepRetryScheduled{StepID: "a", Attempt: 2, Due: epoch}}, "retry_order"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHistory(t, "r", event.Spec{})
			h.add(tc.events...)
			vs := core.Check("r", h.envs)
			require.NotEmpty(t, vs)
			require.Equal(t, tc.rule, vs[0].Rule, "%v", vs)
		})
	}
	// Terminating a paused run is valid: the operator's step.cancelled and run.failed are no
	// decisions.
	h := newHistory(t, "t", event.Spec{})
	h.add(scheduled(stepSpec("a", "a", `1`)), &event.RunPaused{Cause: event.PauseOperator})
	ps, err := core.Terminate(h.snapshot(), "stuck")
	require.NoError(t, err)
	h.add(ps...)
	require.Empty(t, core.Check("t", h.envs))
	require.Equal(t, core.StatusFailed, h.snapshot().Status)
}

func TestPauseOnExhaustedRetries(t *testing.T) {
	t.Parallel()
	policy := event.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second, OnExhaustion: event.ExhaustionPauseRun}.Normalize()
	h := newHistory(t, "x", event.Spec{})
	h.add(scheduled(event.StepSpec{ID: "charge", Name: "charge", Input: json.RawMessage(`1`), Retry: policy}))
	boom := core.StepOutcome{Err: &event.ErrorInfo{Kind: "bug", Message: "nil map"}}
	for attempt := 1; attempt <= 2; attempt++ {
		ps, err := core.StepResult(h.snapshot(), "charge", attempt, boom, h.now)
		require.NoError(t, err)
		require.IsType(t, &event.StepRetryScheduled{}, ps[1], "attempts left: a retry as usual")
		h.add(ps...)
		ps, err = core.Fire(h.snapshot(), core.Timer{RunID: "x", Kind: core.TimerRetry, ID: "charge", Attempt: attempt + 1, Due: h.now})
		require.NoError(t, err)
		h.add(ps...)
	}
	ps, err := core.StepResult(h.snapshot(), "charge", 3, boom, h.now)
	require.NoError(t, err)
	require.Len(t, ps, 2)
	failed := ps[0].(*event.StepFailed)
	require.False(t, failed.Final, "the step does not fail: the run pauses")
	paused := ps[1].(*event.RunPaused)
	require.Equal(t, event.PauseStepExhausted, paused.Cause)
	require.Equal(t, "charge", paused.StepID)
	require.Equal(t, 3, paused.Attempt)
	h.add(ps...)
	s := h.snapshot()
	require.Equal(t, core.StatusPaused, s.Status)
	require.True(t, s.Steps["charge"].Held)
	require.Equal(t, core.StepRetrying, s.Steps["charge"].Status)
	require.Empty(t, core.Timers(s), "a held step has no retry timer")
	require.Equal(t, "paused: step charge exhausted 3 attempt(s): bug: nil map; fix and run `flow unpause x`", s.Summary().Detail)
	v, err := core.Decide(s, always(core.Complete{}), core.DecideOptions{})
	require.NoError(t, err)
	require.True(t, v.Waiting())

	// Unpausing schedules a fresh attempt, due at once, in the same commit.
	ps, err = core.UnpauseRun(s, "fixed", "ann", "u-1", h.now)
	require.NoError(t, err)
	require.Equal(t, []event.Payload{
		&event.RunUnpaused{Reason: "fixed", By: "ann", DeliveryID: "u-1", Paused: event.Duration(time.Second)},
		&event.StepRetryScheduled{StepID: "charge", Attempt: 4, Due: h.now},
		&event.StepRetryFired{StepID: "charge", Attempt: 4},
	}, ps)
	h.add(ps...)
	s = h.snapshot()
	require.Empty(t, core.Check("x", h.envs))
	require.Equal(t, []string{"charge"}, s.InFlight())
	require.False(t, s.Steps["charge"].Held)

	// The fresh attempt fails as well: the run pauses again.
	ps, err = core.StepResult(s, "charge", 4, boom, h.now)
	require.NoError(t, err)
	require.IsType(t, &event.RunPaused{}, ps[1])
	h.add(ps...)
	require.Equal(t, core.StatusPaused, h.snapshot().Status)
	require.Equal(t, 2, h.snapshot().Pauses)

	// A non-retryable error fails the step as under fail_run.
	h2 := newHistory(t, "y", event.Spec{})
	h2.add(scheduled(event.StepSpec{ID: "charge", Name: "charge", Input: json.RawMessage(`1`),
		Retry: event.RetryPolicy{NonRetryable: []string{"declined"}, OnExhaustion: event.ExhaustionPauseRun}.Normalize()}))
	ps, err = core.StepResult(h2.snapshot(), "charge", 1, core.StepOutcome{Err: &event.ErrorInfo{Kind: "declined", Message: "no"}}, h2.now)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.True(t, ps[0].(*event.StepFailed).Final)
	h2.add(ps...)
	v, err = core.Decide(h2.snapshot(), always(core.Complete{}), core.DecideOptions{})
	require.NoError(t, err)
	require.IsType(t, &event.RunFailed{}, v.Events[len(v.Events)-1])
}

func TestPauseReplay(t *testing.T) {
	t.Parallel()
	// A history paused by exhaustion and unpaused replays against the same code.
	policy := event.RetryPolicy{MaxAttempts: 1, OnExhaustion: event.ExhaustionPauseRun}.Normalize()
	code := script{fn: func(s *core.Snapshot) core.Decision {
		if st := s.Steps["work"]; st != nil && st.Status == core.StepCompleted {
			return core.Complete{Output: st.Output}
		}
		return core.ScheduleSteps{Steps: []core.StepCall{{ID: "work", Name: "work", Input: json.RawMessage(`1`), Retry: policy}}}
	}}
	h := newHistory(t, "rp", event.Spec{})
	h.add(&event.StepScheduled{Steps: []event.StepSpec{{ID: "work", Name: "work", Input: json.RawMessage(`1`), Retry: policy}}})
	ps, err := core.StepResult(h.snapshot(), "work", 1, core.StepOutcome{Err: &event.ErrorInfo{Message: "boom"}}, h.now)
	require.NoError(t, err)
	h.add(ps...)
	ps, err = core.UnpauseRun(h.snapshot(), "", "", "u", h.now)
	require.NoError(t, err)
	h.add(ps...)
	ps, err = core.StepResult(h.snapshot(), "work", 2, core.StepOutcome{Output: json.RawMessage(`7`)}, h.now)
	require.NoError(t, err)
	h.add(ps...)
	v, err := core.Decide(h.snapshot(), code, core.DecideOptions{})
	require.NoError(t, err)
	h.add(v.Events...)
	s, err := core.Replay("rp", h.envs, code, core.DecideOptions{})
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, s.Status)
	require.JSONEq(t, `7`, string(s.Outcome.Output))
}
