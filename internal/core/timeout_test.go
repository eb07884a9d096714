package core_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

func dur(d time.Duration) event.Duration { return event.Duration(d) }

// A step's timeouts are validated, recorded in step.scheduled, and compared on replay like its
// retry policy: nil and all-zero are the same "none".
func TestStepTimeoutsValidationAndDeterminism(t *testing.T) {
	t.Parallel()
	hb := &event.StepTimeouts{Heartbeat: dur(2 * time.Second), StartToClose: dur(time.Minute)}
	withTimeouts := func(to *event.StepTimeouts) core.StepCall {
		c := call("a", "charge", `1`)
		c.Timeouts = to
		return c
	}
	for _, tc := range []struct {
		name string
		// recorded is the step.scheduled already in history (nil: none yet).
		recorded *event.StepTimeouts
		none     bool
		issued   *event.StepTimeouts
		// want is the recorded timeouts of a new step.scheduled; wantErr the error's text.
		want    *event.StepTimeouts
		waiting bool
		field   string
		invalid string
	}{
		{name: "none", none: true, issued: nil, want: nil},
		{name: "all zero is none", none: true, issued: &event.StepTimeouts{}, want: nil},
		{name: "recorded", none: true, issued: hb, want: hb},
		{name: "negative", none: true, issued: &event.StepTimeouts{Heartbeat: dur(-time.Second)}, invalid: "must not be negative"},
		{name: "same again", recorded: hb, issued: &event.StepTimeouts{Heartbeat: dur(2 * time.Second), StartToClose: dur(time.Minute)}, waiting: true},
		{name: "zero again", recorded: nil, issued: &event.StepTimeouts{}, waiting: true},
		{name: "changed", recorded: hb, issued: &event.StepTimeouts{Heartbeat: dur(3 * time.Second), StartToClose: dur(time.Minute)}, field: "timeouts"},
		{name: "added", recorded: nil, issued: hb, field: "timeouts"},
		{name: "dropped", recorded: hb, issued: nil, field: "timeouts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHistory(t, "r", event.Spec{})
			if !tc.none {
				spec := stepSpec("a", "charge", `1`)
				spec.Timeouts = tc.recorded
				h.add(scheduled(spec))
			}
			v, err := core.Validate(h.snapshot(), core.ScheduleSteps{Steps: []core.StepCall{withTimeouts(tc.issued)}})
			switch {
			case tc.invalid != "":
				var inv *core.InvalidDecisionError
				require.True(t, errors.As(err, &inv), "%v", err)
				require.Contains(t, err.Error(), tc.invalid)
			case tc.field != "":
				var nd *core.NonDeterminismError
				require.True(t, errors.As(err, &nd), "%v", err)
				require.Equal(t, tc.field, nd.Field)
			case tc.waiting:
				require.NoError(t, err)
				require.True(t, v.Waiting(), "%+v", v)
			default:
				require.NoError(t, err)
				require.Len(t, v.Events, 1)
				got := v.Events[0].(*event.StepScheduled).Steps[0].Timeouts
				require.Equal(t, tc.want, got)
				// Replaying the same history decides the same: the events are deterministic.
				h.add(v.Events...)
				s := h.snapshot()
				require.Equal(t, tc.want, s.Steps["a"].Timeouts)
				if tc.want != nil {
					require.Equal(t, h.envs[1].Time, s.Steps["a"].InFlightSince)
				} else {
					require.True(t, s.Steps["a"].InFlightSince.IsZero(), "kept only for steps with timeouts")
				}
			}
		})
	}
}

// run.started's timeouts give the run its timers; firing one ends the run with run.failed
// (cause timeout, the timeout's kind), after cancelling its unsettled steps; the end makes them
// moot.
func TestRunTimeoutTimers(t *testing.T) {
	t.Parallel()
	to, err := core.RunTimeouts(time.Hour, time.Minute, epoch, nil)
	require.NoError(t, err)
	require.Equal(t, &event.RunTimeouts{Execution: dur(time.Hour), ExecutionDeadline: epoch.Add(time.Hour),
		Run: dur(time.Minute), RunDeadline: epoch.Add(time.Minute)}, to)
	// A continuation inherits the execution deadline, and counts its run timeout afresh.
	later := epoch.Add(10 * time.Minute)
	next, err := core.RunTimeouts(time.Hour, time.Minute, later, to)
	require.NoError(t, err)
	require.Equal(t, epoch.Add(time.Hour), next.ExecutionDeadline)
	require.Equal(t, later.Add(time.Minute), next.RunDeadline)
	none, err := core.RunTimeouts(0, 0, epoch, nil)
	require.NoError(t, err)
	require.Nil(t, none)
	_, err = core.RunTimeouts(-time.Second, 0, epoch, nil)
	require.ErrorIs(t, err, core.ErrInvalidInput)

	h := &history{t: t, run: "r", now: epoch}
	h.add(&event.RunStarted{Spec: event.Spec{Definition: "test"}, Input: json.RawMessage(`1`), Seed: "s", Timeouts: to})
	h.add(scheduled(stepSpec("a", "charge", `1`)))
	s := h.snapshot()
	timers := core.Timers(s)
	runT := core.Timer{RunID: "r", Kind: core.TimerRunTimeout, ID: "run", Due: epoch.Add(time.Minute), Seq: 1}
	execT := core.Timer{RunID: "r", Kind: core.TimerRunTimeout, ID: "execution", Due: epoch.Add(time.Hour), Seq: 1}
	require.ElementsMatch(t, []core.Timer{runT, execT}, timers)
	require.Equal(t, "run_timeout.run", runT.Key())
	require.ElementsMatch(t, timers, core.NewTimers("r", []event.Payload{h.envs[0].Payload}))
	require.ElementsMatch(t, timers, core.Derive(s, h.envs[:1]).Timers)

	_, err = core.Fire(s, core.Timer{RunID: "r", Kind: core.TimerRunTimeout, ID: "run", Due: epoch})
	require.ErrorIs(t, err, core.ErrStale, "a deadline the run did not record is not pending")
	evs, err := core.Fire(s, runT)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	c := evs[0].(*event.StepCancelled)
	require.Equal(t, event.CauseTimeout, c.Cause)
	require.True(t, c.Steps[0].SideEffectUnknown)
	f := evs[1].(*event.RunFailed)
	require.Equal(t, event.CauseTimeout, f.Cause)
	require.Equal(t, event.TimeoutRun, f.Error.Kind)
	require.Contains(t, f.Error.Message, "run timeout of 1m0s")
	h.add(evs...)
	s = h.snapshot()
	require.Equal(t, core.StatusFailed, s.Status)
	require.ElementsMatch(t, []core.Timer{{RunID: "r", Kind: core.TimerRunTimeout, ID: "run", Due: runT.Due, Seq: 1},
		{RunID: "r", Kind: core.TimerRunTimeout, ID: "execution", Due: execT.Due, Seq: 1}}, core.Derive(s, h.envs[2:]).Moot)
	_, err = core.Fire(s, execT)
	require.ErrorIs(t, err, core.ErrStale)

	// A delayed run times out too: the timeout is not a decision.
	d := &history{t: t, run: "d", now: epoch}
	d.add(&event.RunStarted{Spec: event.Spec{Definition: "test"}, Input: json.RawMessage(`1`), Seed: "s", NotBefore: epoch.Add(time.Hour),
		Timeouts: &event.RunTimeouts{Execution: dur(time.Minute), ExecutionDeadline: epoch.Add(time.Minute)}})
	evs, err = core.Fire(d.snapshot(), core.Timer{RunID: "d", Kind: core.TimerRunTimeout, ID: "execution", Due: epoch.Add(time.Minute), Seq: 1})
	require.NoError(t, err)
	d.add(evs...)
	require.Equal(t, event.TimeoutExecution, d.snapshot().Outcome.Error.Kind)
}

// A step timeout fails the attempt in flight with the timeout's kind, retryable under the
// step's policy; anything but the attempt in flight is stale; a late result of the timed-out
// attempt is refused.
func TestTimeoutStep(t *testing.T) {
	t.Parallel()
	spec := stepSpec("a", "charge", `1`)
	spec.Retry = event.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second}.Normalize()
	spec.Timeouts = &event.StepTimeouts{ScheduleToStart: dur(5 * time.Second), Heartbeat: dur(2 * time.Second)}
	h := newHistory(t, "r", event.Spec{}).add(scheduled(spec))
	s := h.snapshot()
	now := epoch.Add(time.Minute)

	for _, tc := range []struct {
		name    string
		attempt int
		kind    string
		err     error
	}{
		{"not configured", 1, event.TimeoutStartToClose, core.ErrInvalidInput},
		{"another attempt", 2, event.TimeoutHeartbeat, core.ErrStale},
	} {
		_, err := core.TimeoutStep(s, "a", tc.attempt, tc.kind, now)
		require.ErrorIs(t, err, tc.err, tc.name)
	}
	_, err := core.TimeoutStep(s, "nope", 1, event.TimeoutHeartbeat, now)
	require.ErrorIs(t, err, core.ErrNotFound)

	evs, err := core.TimeoutStep(s, "a", 1, event.TimeoutHeartbeat, now)
	require.NoError(t, err)
	require.Equal(t, []event.Payload{
		&event.StepFailed{StepID: "a", Attempt: 1, Error: event.ErrorInfo{Kind: event.TimeoutHeartbeat, Message: "attempt 1: the heartbeat-timeout of 2s passed"},
			Retryable: true, Timeout: event.TimeoutHeartbeat},
		&event.StepRetryScheduled{StepID: "a", Attempt: 2, Due: now.Add(time.Second)},
	}, evs)
	require.True(t, core.IsInput(evs[0]), "a timeout asks for a drive: its writer is not the attempt's worker")
	require.False(t, core.IsInput(&event.StepFailed{StepID: "a", Attempt: 1}))
	h.add(evs...)
	s = h.snapshot()
	_, err = core.StepResult(s, "a", 1, core.StepOutcome{Output: json.RawMessage(`1`)}, now)
	require.ErrorIs(t, err, core.ErrStale, "the timed-out attempt's late result is refused")

	// A policy listing the kind as non-retryable makes the timeout final.
	spec.Retry.NonRetryable = []string{event.TimeoutHeartbeat}
	h2 := newHistory(t, "r2", event.Spec{}).add(scheduled(spec))
	evs, err = core.TimeoutStep(h2.snapshot(), "a", 1, event.TimeoutHeartbeat, now)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.True(t, evs[0].(*event.StepFailed).Final)
}

// A step with a schedule-to-start timeout has a step_start timer per attempt, due from the event
// that put the attempt in flight; firing it fails the attempt; it is moot once the attempt
// settled.
func TestScheduleToStartTimer(t *testing.T) {
	t.Parallel()
	spec := stepSpec("a", "charge", `1`)
	spec.Retry = event.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Second}.Normalize()
	spec.Timeouts = &event.StepTimeouts{ScheduleToStart: dur(5 * time.Second)}
	h := newHistory(t, "r", event.Spec{}).add(scheduled(spec))
	s := h.snapshot()
	first := core.Timer{RunID: "r", Kind: core.TimerStepStart, ID: "a", Attempt: 1, Due: h.envs[1].Time.Add(5 * time.Second), Seq: 2}
	require.Equal(t, []core.Timer{first}, core.Timers(s))
	require.Equal(t, "step_start.a.1", first.Key())
	require.Equal(t, []core.Timer{first}, core.Derive(s, h.envs[1:]).Timers)

	evs, err := core.Fire(s, first)
	require.NoError(t, err)
	f := evs[0].(*event.StepFailed)
	require.Equal(t, event.TimeoutScheduleToStart, f.Timeout)
	require.False(t, f.Final)
	h.add(evs...)
	h.add(&event.StepRetryFired{StepID: "a", Attempt: 2})
	s = h.snapshot()
	second := core.Timer{RunID: "r", Kind: core.TimerStepStart, ID: "a", Attempt: 2, Due: h.envs[4].Time.Add(5 * time.Second), Seq: 5}
	require.Equal(t, []core.Timer{second}, core.Timers(s))
	require.Equal(t, []core.Timer{second}, core.Derive(s, h.envs[4:]).Timers)
	_, err = core.Fire(s, first)
	require.ErrorIs(t, err, core.ErrStale)
	h.add(&event.StepCompleted{StepID: "a", Attempt: 2, Output: json.RawMessage(`2`)})
	s = h.snapshot()
	require.Empty(t, core.Timers(s))
	_, err = core.Fire(s, second)
	require.ErrorIs(t, err, core.ErrStale)
}

// A heartbeat's answer, from the run's history.
func TestCheckAttempt(t *testing.T) {
	t.Parallel()
	base := func() *history { return newHistory(t, "r", event.Spec{}).add(scheduled(stepSpec("a", "charge", `1`))) }
	for _, tc := range []struct {
		name    string
		then    []event.Payload
		attempt int
		cancel  string
	}{
		{"in flight", nil, 1, ""},
		{"run cancel requested", []event.Payload{&event.RunCancelRequested{Reason: "no longer needed"}}, 1, "cancellation of run \"r\" was requested: no longer needed"},
		{"another attempt", nil, 2, "is no longer in flight"},
		{"settled", []event.Payload{&event.StepCompleted{StepID: "a", Attempt: 1, Output: json.RawMessage(`1`)}}, 1, "is no longer in flight"},
		{"run ended", []event.Payload{&event.StepCancelled{Steps: []event.CancelledStep{{StepID: "a", Attempt: 1, SideEffectUnknown: true}}, Reason: "x", Cause: event.CauseOperator},
			&event.RunFailed{Error: event.ErrorInfo{Kind: "terminated", Message: "x"}, Cause: event.CauseOperator}}, 1, "ended (failed)"},
	} {
		h := base().add(tc.then...)
		c := core.CheckAttempt(h.snapshot(), "a", tc.attempt)
		require.Equal(t, tc.cancel != "", c.Cancel, tc.name)
		require.True(t, strings.Contains(c.Reason, tc.cancel), "%s: %q", tc.name, c.Reason)
	}
	require.False(t, core.CheckAttempt(base().snapshot(), "unknown", 1).Cancel, "a step a lagging read does not show yet")
}

// An attempt whose step the workflow abandoned is never told it is cancelled by its heartbeat,
// whatever happened to its run afterwards (docs/cancellation.md): the abandonment is checked
// before the run's end and its cancellation request.
func TestCheckAttemptAbandoned(t *testing.T) {
	t.Parallel()
	abandoned := func() *history {
		return newHistory(t, "r", event.Spec{}).add(scheduled(stepSpec("a", "charge", `1`)),
			&event.StepCancelled{Steps: []event.CancelledStep{{StepID: "a", Attempt: 1, SideEffectUnknown: true}},
				Reason: "step \"a\" cancelled by the workflow (abandon)", Cause: event.CauseWorkflow, Cancellation: event.CancelAbandon})
	}
	for _, tc := range []struct {
		name string
		then []event.Payload
	}{
		{"run goes on", nil},
		{"run completed", []event.Payload{&event.RunCompleted{Output: json.RawMessage(`"done"`)}}},
		{"run cancel requested", []event.Payload{&event.RunCancelRequested{Reason: "no longer needed"}}},
		{"run cancelled", []event.Payload{&event.RunCancelRequested{Reason: "no longer needed"}, &event.RunCancelled{Reason: "no longer needed", Cause: event.CauseOperator}}},
	} {
		s := abandoned().add(tc.then...).snapshot()
		c := core.CheckAttempt(s, "a", 1)
		require.False(t, c.Cancel, "%s: an abandoned attempt was told %q", tc.name, c.Reason)
		require.False(t, s.AttemptCancelled("a", 1), "%s: the driver's check agrees", tc.name)
	}
}

// The new fields' validation in the events themselves.
func TestTimeoutFieldsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    event.Payload
		bad  string
	}{
		{"run deadline missing", &event.RunStarted{Spec: event.Spec{Definition: "d"}, Input: json.RawMessage(`1`), Seed: "s",
			Timeouts: &event.RunTimeouts{Run: dur(time.Second)}}, "run_deadline"},
		{"negative execution", &event.RunStarted{Spec: event.Spec{Definition: "d"}, Input: json.RawMessage(`1`), Seed: "s",
			Timeouts: &event.RunTimeouts{Execution: dur(-time.Second)}}, "timeouts.execution"},
		{"negative step timeout", &event.StepScheduled{Steps: []event.StepSpec{{ID: "a", Name: "a", Input: json.RawMessage(`1`),
			Retry: event.RetryPolicy{}.Normalize(), Timeouts: &event.StepTimeouts{StartToClose: dur(-1)}}}}, "steps[0].timeouts.start_to_close"},
		{"unknown timeout kind", &event.StepFailed{StepID: "a", Attempt: 1, Error: event.ErrorInfo{Message: "m"}, Timeout: "soon"}, "timeout"},
		{"valid", &event.StepFailed{StepID: "a", Attempt: 1, Error: event.ErrorInfo{Message: "m"}, Timeout: event.TimeoutHeartbeat}, ""},
	} {
		err := tc.p.Validate()
		if tc.bad == "" {
			require.NoError(t, err, tc.name)
			continue
		}
		require.ErrorContains(t, err, tc.bad, tc.name)
	}
}
