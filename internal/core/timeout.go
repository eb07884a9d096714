package core

import (
	"fmt"
	"strings"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// Timeouts (docs/timeouts.md). A run's execution and run timeouts are recorded in run.started
// as deadlines (event.RunTimeouts) and fired by the scheduler as durable timers of kind
// TimerRunTimeout: the firing ends the run with run.failed, Cause CauseTimeout, Error.Kind
// event.TimeoutRun or event.TimeoutExecution, after step.cancelled for its unsettled steps, as
// an operator's termination does. A continuation inherits the execution deadline.
//
// A step's timeouts are recorded per member in step.scheduled (event.StepTimeouts). The
// schedule-to-start timeout is a durable timer of kind TimerStepStart, one per attempt with
// the timeout, due at the attempt's in-flight time plus the timeout; the scheduler fires it only
// if no worker recorded the attempt's start in FLOW_HEARTBEATS. The start-to-close and heartbeat
// timeouts are watched by the scheduler from the heartbeat entries the worker writes (the
// attempt's start, then each heartbeat). Whichever fires, TimeoutStep gives the events: a
// step.failed naming the timeout, retryable under the step's retry policy, and, with attempts
// left, its step.retry_scheduled.

const (
	// TimerRunTimeout ends a run whose run timeout (ID "run") or execution timeout (ID
	// "execution") passed. Its Seq is 1: run.started recorded the deadline.
	TimerRunTimeout TimerKind = "run_timeout"
	// TimerStepStart fails an attempt (ID the step ID, Attempt the attempt) that no worker
	// started within its step's schedule-to-start timeout.
	TimerStepStart TimerKind = "step_start"
)

// The IDs of run timeout timers.
const (
	runTimeoutID       = "run"
	executionTimeoutID = "execution"
)

// timeoutKey is Timer.Key for the kinds of this file.
func timeoutKey(t Timer) (string, bool) {
	switch t.Kind {
	case TimerRunTimeout:
		return "run_timeout." + t.ID, true
	case TimerStepStart:
		return fmt.Sprintf("step_start.%s.%d", t.ID, t.Attempt), true
	}
	return "", false
}

// RunTimeouts returns run.started's record of timeouts run and execution for a run started
// at now: the deadlines are now plus each timeout, but a continuation passes inherited, its
// predecessor's execution deadline, which it keeps. Nil when no timeout is set.
func RunTimeouts(execution, run time.Duration, now time.Time, inherited *event.RunTimeouts) (*event.RunTimeouts, error) {
	if execution < 0 || run < 0 {
		return nil, fmt.Errorf("%w: a run timeout must not be negative (execution %s, run %s)", ErrInvalidInput, execution, run)
	}
	t := &event.RunTimeouts{Execution: event.Duration(execution), Run: event.Duration(run)}
	if inherited != nil && inherited.Execution > 0 {
		t.Execution, t.ExecutionDeadline = inherited.Execution, inherited.ExecutionDeadline
	} else if execution > 0 {
		t.ExecutionDeadline = now.Add(execution).UTC()
	}
	if run > 0 {
		t.RunDeadline = now.Add(run).UTC()
	}
	if t.Execution == 0 && t.Run == 0 {
		return nil, nil
	}
	return t, nil
}

// runTimeoutTimers returns the timers of run s's run timeouts.
func runTimeoutTimers(s *Snapshot) []Timer {
	t := s.Timeouts
	if t == nil {
		return nil
	}
	var ts []Timer
	if t.Run > 0 {
		ts = append(ts, Timer{RunID: s.RunID, Kind: TimerRunTimeout, ID: runTimeoutID, Due: t.RunDeadline, Seq: 1})
	}
	if t.Execution > 0 {
		ts = append(ts, Timer{RunID: s.RunID, Kind: TimerRunTimeout, ID: executionTimeoutID, Due: t.ExecutionDeadline, Seq: 1})
	}
	return ts
}

// stepStartTimer returns the schedule-to-start timer of step st's attempt in flight, if it has
// one.
func stepStartTimer(s *Snapshot, st *Step) (Timer, bool) {
	if st.Status != StepRunning || st.Timeouts == nil || st.Timeouts.ScheduleToStart <= 0 {
		return Timer{}, false
	}
	return Timer{RunID: s.RunID, Kind: TimerStepStart, ID: st.ID, Attempt: st.Attempt,
		Due: st.InFlightSince.Add(time.Duration(st.Timeouts.ScheduleToStart)).UTC(), Seq: st.InFlightSeq}, true
}

// timeoutTimers returns the pending timers of this file's kinds.
func timeoutTimers(s *Snapshot) []Timer {
	ts := runTimeoutTimers(s)
	for st := s.unsettled.first; st != nil; st = st.next {
		if t, ok := stepStartTimer(s, st); ok {
			ts = append(ts, t)
		}
	}
	return ts
}

// deriveTimeouts adds to c the timers of this file's kinds that event e of commit creates.
func deriveTimeouts(s *Snapshot, e event.Envelope, c *Consequences) {
	if s.Terminal() {
		return
	}
	switch p := e.Payload.(type) {
	case *event.RunStarted:
		c.Timers = append(c.Timers, runTimeoutTimers(s)...)
	case *event.StepScheduled:
		for _, spec := range p.Steps {
			if st, ok := s.Steps[spec.ID]; ok && st.InFlightSeq == e.Seq {
				if t, ok := stepStartTimer(s, st); ok {
					c.Timers = append(c.Timers, t)
				}
			}
		}
	case *event.StepRetryFired:
		if st, ok := s.Steps[p.StepID]; ok && st.InFlightSeq == e.Seq && st.Attempt == p.Attempt {
			if t, ok := stepStartTimer(s, st); ok {
				c.Timers = append(c.Timers, t)
			}
		}
	}
}

// mootTimeouts returns the timers of this file's kinds that the end of run s makes moot.
func mootTimeouts(s *Snapshot) []Timer { return runTimeoutTimers(s) }

// fireTimeout returns the firing of timer t of this file's kinds.
func fireTimeout(s *Snapshot, t Timer) ([]event.Payload, error) {
	switch t.Kind {
	case TimerRunTimeout:
		for _, rt := range runTimeoutTimers(s) {
			if rt.ID == t.ID && rt.Due.Equal(t.Due) {
				return runTimedOut(s, t.ID), nil
			}
		}
	case TimerStepStart:
		if st, ok := s.Steps[t.ID]; ok {
			if pt, ok := stepStartTimer(s, st); ok && pt.Attempt == t.Attempt {
				return TimeoutStep(s, t.ID, t.Attempt, event.TimeoutScheduleToStart, t.Due)
			}
		}
	}
	return nil, fmt.Errorf("%w: timer %s of run %q is not pending", ErrStale, t.Key(), s.RunID)
}

// runTimedOut returns the events that end run s because its run or execution timeout passed.
func runTimedOut(s *Snapshot, id string) []event.Payload {
	kind, d, at := event.TimeoutRun, s.Timeouts.Run, s.Timeouts.RunDeadline
	what := "run timeout"
	if id == executionTimeoutID {
		kind, d, at = event.TimeoutExecution, s.Timeouts.Execution, s.Timeouts.ExecutionDeadline
		what = "execution timeout"
	}
	msg := fmt.Sprintf("the %s of %s passed at %s", what, time.Duration(d), at.Format(time.RFC3339Nano))
	failed := &event.RunFailed{Error: event.ErrorInfo{Kind: kind, Message: msg}, Cause: event.CauseTimeout}
	return endEvents(s, failed, event.CauseTimeout, msg)
}

// TimeoutStep returns the events that end attempt of step stepID because timeout kind (one of
// event.TimeoutScheduleToStart, TimeoutStartToClose, TimeoutHeartbeat) passed, at now: a
// step.failed naming the timeout, final or followed by its retry as StepResult decides. It
// returns ErrStale if the attempt is not in flight any more (its result, or another timeout,
// was committed first), ErrInvalidInput if the step has no such timeout.
func TimeoutStep(s *Snapshot, stepID string, attempt int, kind string, now time.Time) ([]event.Payload, error) {
	st, ok := s.Steps[stepID]
	if !ok {
		return nil, fmt.Errorf("%w: step %q in run %q", ErrNotFound, stepID, s.RunID)
	}
	var d event.Duration
	if st.Timeouts != nil {
		switch kind {
		case event.TimeoutScheduleToStart:
			d = st.Timeouts.ScheduleToStart
		case event.TimeoutStartToClose:
			d = st.Timeouts.StartToClose
		case event.TimeoutHeartbeat:
			d = st.Timeouts.Heartbeat
		}
	}
	if d <= 0 {
		return nil, fmt.Errorf("%w: step %q of run %q has no %s", ErrInvalidInput, stepID, s.RunID, kind)
	}
	msg := fmt.Sprintf("attempt %d: the %s of %s passed", attempt, strings.ReplaceAll(kind, "_", "-"), time.Duration(d))
	events, err := StepResult(s, stepID, attempt, StepOutcome{Err: &event.ErrorInfo{Kind: kind, Message: msg}}, now)
	if err != nil {
		return nil, err
	}
	events[0].(*event.StepFailed).Timeout = kind
	return events, nil
}

// stepTimeouts validates a step's timeouts as a decision gives them: nil for none, else a copy.
func stepTimeouts(t *event.StepTimeouts) (*event.StepTimeouts, error) {
	if t.IsZero() {
		return nil, nil
	}
	if t.ScheduleToStart < 0 || t.StartToClose < 0 || t.Heartbeat < 0 {
		return nil, fmt.Errorf("a step timeout must not be negative (%s)", timeoutsForm(t))
	}
	cp := *t
	return &cp, nil
}

// timeoutsForm renders step timeouts for a non-determinism error.
func timeoutsForm(t *event.StepTimeouts) plain {
	if t.IsZero() {
		return "none"
	}
	var parts []string
	for _, p := range []struct {
		name string
		d    event.Duration
	}{{"schedule_to_start", t.ScheduleToStart}, {"start_to_close", t.StartToClose}, {"heartbeat", t.Heartbeat}} {
		if p.d != 0 {
			parts = append(parts, p.name+"="+time.Duration(p.d).String())
		}
	}
	return plain(strings.Join(parts, " "))
}

// AttemptCheck is what a heartbeat of an attempt learns from the run's history: whether the
// attempt should stop, and why.
type AttemptCheck struct {
	// Cancel is set when the attempt should stop: the run ended or its cancellation was
	// requested, the attempt is no longer in flight (it timed out, or was cancelled), or the
	// step's cancellation was requested. It is never set for an attempt whose step the
	// workflow abandoned.
	Cancel bool
	// Reason says why, for the step's context cause.
	Reason string
}

// CheckAttempt returns what a heartbeat of attempt of step stepID answers, from snapshot s.
// An attempt whose step the workflow abandoned is never told, whatever happened to the run
// since (it ended, its cancellation was requested): the abandonment is checked first, as in
// Snapshot.AttemptCancelled (docs/cancellation.md).
func CheckAttempt(s *Snapshot, stepID string, attempt int) AttemptCheck {
	st, ok := s.Steps[stepID]
	if ok && st.Cancellation == event.CancelAbandon {
		return AttemptCheck{}
	}
	if s.Terminal() {
		return AttemptCheck{Cancel: true, Reason: fmt.Sprintf("run %q ended (%s)", s.RunID, s.Outcome.Outcome)}
	}
	if s.CancelRequested {
		r := fmt.Sprintf("cancellation of run %q was requested", s.RunID)
		if s.CancelReason != "" {
			r += ": " + s.CancelReason
		}
		return AttemptCheck{Cancel: true, Reason: r}
	}
	if !ok {
		return AttemptCheck{} // not visible yet in a lagging read; the next heartbeat checks again
	}
	if st.Status != StepRunning || st.Attempt != attempt {
		return AttemptCheck{Cancel: true, Reason: fmt.Sprintf("step %q attempt %d is no longer in flight (%s at attempt %d)", stepID, attempt, st.Status, st.Attempt)}
	}
	if reason, ok := stepCancelRequested(s, st); ok {
		return AttemptCheck{Cancel: true, Reason: reason}
	}
	return AttemptCheck{}
}

// stepCancelRequested is the per-step cancellation check of a heartbeat: it reports whether the
// workflow asked to cancel step st alone and waits for the attempt to end (ctx.CancelStep with
// wait_cancelled, step.cancel_requested), with the reason (docs/cancellation.md).
func stepCancelRequested(s *Snapshot, st *Step) (string, bool) {
	if !st.CancelPending() {
		return "", false
	}
	return cancelReason("step", st.ID, st.Cancellation), true
}
