package core

import (
	"fmt"

	"github.com/flowrun/flow/pkg/event"
)

// TimerChildRetry starts the next attempt of a child after its retry backoff
// (child.retry_fired). Its ID is the child ID and Attempt the attempt due.
const TimerChildRetry TimerKind = "child_retry"

// attempt returns the child's current attempt, from 1.
func (c *Child) attempt() int { return max(1, c.Attempt) }

// checkChildRetry checks child.retry_scheduled and child.retry_fired (see check).
func (s *Snapshot) checkChildRetry(e event.Envelope) error {
	switch p := e.Payload.(type) {
	case *event.ChildRetryScheduled:
		c, ok := s.Children[p.ChildID]
		switch {
		case !ok:
			return s.fail(e, "unknown_id", "child %q was never scheduled", p.ChildID)
		case c.Settled:
			return s.fail(e, "child_state", "retry of child %q scheduled, but it already settled at seq %d", p.ChildID, c.SettledSeq)
		case c.Retry == nil:
			return s.fail(e, "retry_order", "retry of child %q scheduled, but the child has no retry policy", p.ChildID)
		case c.Retrying() || p.Attempt != c.attempt()+1:
			return s.fail(e, "retry_order", "retry of child %q attempt %d does not follow the end of attempt %d's run", p.ChildID, p.Attempt, c.attempt())
		case p.Attempt > c.Retry.MaxAttempts:
			return s.fail(e, "retry_order", "retry of child %q attempt %d exceeds its %d attempts", p.ChildID, p.Attempt, c.Retry.MaxAttempts)
		case p.RunID != event.ChildAttemptRunID(c.RunID, p.Attempt):
			return s.fail(e, "retry_order", "retry of child %q attempt %d names run %q, not %q", p.ChildID, p.Attempt, p.RunID, event.ChildAttemptRunID(c.RunID, p.Attempt))
		case c.CancelPending():
			return s.fail(e, "cancel_state", "retry of child %q scheduled, but its cancellation was requested at seq %d", p.ChildID, c.CancelSeq)
		}
	case *event.ChildRetryFired:
		c, ok := s.Children[p.ChildID]
		switch {
		case !ok:
			return s.fail(e, "unknown_id", "child %q was never scheduled", p.ChildID)
		case !c.Retrying() || c.Attempt != p.Attempt || c.CurrentRunID() != p.RunID:
			return s.fail(e, "child_state", "retry of child %q attempt %d fired, but the child is not waiting for it", p.ChildID, p.Attempt)
		}
	}
	return nil
}

// mutateChildRetry applies child.retry_scheduled and child.retry_fired.
func (s *Snapshot) mutateChildRetry(e event.Envelope) {
	switch p := e.Payload.(type) {
	case *event.ChildRetryScheduled:
		c := s.Children[p.ChildID]
		c.Attempt, c.AttemptRunID, c.RetryDue, c.RetrySeq = p.Attempt, p.RunID, p.Due, e.Seq
		c.EndedRunID = p.FailedRunID // the last run that ran, until the next one ends
	case *event.ChildRetryFired:
		s.Children[p.ChildID].RetryDue = zeroTime
	}
}

// childEnded returns the event that records the end of the run of child c (ended: that run,
// or its last continuation): child.retry_scheduled when the run failed and the child's retry
// policy has an attempt left for its error (and the workflow has not asked to cancel the
// child), else child.settled. The retry is due the policy's backoff after the ended run's
// terminal event, so that whoever derives it derives the same event. ErrStale when ended is
// not the run of the child's current attempt.
func childEnded(s *Snapshot, c *Child, ended *Snapshot) ([]event.Payload, error) {
	attempt := 1
	if ended.Parent != nil {
		attempt = max(1, ended.Parent.Attempt)
	}
	if attempt != c.attempt() || c.Retrying() {
		return nil, fmt.Errorf("%w: run %q is attempt %d of child %q of run %q, which is at attempt %d", ErrStale, ended.RunID, attempt, c.ID, s.RunID, c.attempt())
	}
	o := ended.Outcome
	if o.Outcome == event.OutcomeFailed && c.Retry != nil && !c.CancelPending() && attempt < c.Retry.MaxAttempts &&
		(o.Error == nil || c.Retry.Retryable(o.Error.Kind)) {
		e := event.ErrorInfo{Message: "child run failed"}
		if o.Error != nil {
			e = *o.Error
		}
		next := attempt + 1
		return []event.Payload{&event.ChildRetryScheduled{ChildID: c.ID, Attempt: next, RunID: event.ChildAttemptRunID(c.RunID, next),
			Due: o.Time.Add(c.Retry.Backoff(next)).UTC(), FailedRunID: ended.RunID, Error: e}}, nil
	}
	return nil, nil
}

// childRetryTimers returns the run's children waiting out a retry backoff, as timers.
func childRetryTimers(s *Snapshot) []Timer {
	var ts []Timer
	for _, c := range s.Children {
		if c.Retrying() {
			ts = append(ts, Timer{RunID: s.RunID, Kind: TimerChildRetry, ID: c.ID, Attempt: c.Attempt, Due: c.RetryDue, Seq: c.RetrySeq})
		}
	}
	return ts
}

// fireChildRetry returns child.retry_fired for timer t, or nil if the retry is not pending.
func fireChildRetry(s *Snapshot, t Timer) []event.Payload {
	if c, ok := s.Children[t.ID]; ok && c.Retrying() && c.Attempt == t.Attempt {
		return []event.Payload{&event.ChildRetryFired{ChildID: c.ID, Attempt: c.Attempt, RunID: c.CurrentRunID()}}
	}
	return nil
}

// deriveChildRetry adds to c what event e of a commit implies for child retries: the timer of a
// pending child.retry_scheduled, the run of a child.retry_fired to start, and the timer a
// cancellation during the backoff made moot.
func deriveChildRetry(s *Snapshot, e event.Envelope, c *Consequences) {
	if s.Terminal() {
		return
	}
	switch p := e.Payload.(type) {
	case *event.ChildRetryScheduled:
		if ch, ok := s.Children[p.ChildID]; ok && ch.Retrying() && ch.Attempt == p.Attempt {
			c.Timers = append(c.Timers, Timer{RunID: s.RunID, Kind: TimerChildRetry, ID: ch.ID, Attempt: p.Attempt, Due: p.Due, Seq: e.Seq})
		}
	case *event.ChildRetryFired:
		if ch, ok := s.Children[p.ChildID]; ok && !ch.Settled && ch.Attempt == p.Attempt {
			c.Children = append(c.Children, ch.attemptSpec())
		}
	case *event.ChildSettled:
		if ch, ok := s.Children[p.ChildID]; ok && p.Cancellation != "" && ch.Attempt > 1 {
			c.Moot = append(c.Moot, Timer{RunID: s.RunID, Kind: TimerChildRetry, ID: ch.ID, Attempt: ch.Attempt})
		}
	}
}

// attemptSpec returns the spec the run of the child's current attempt starts with.
func (c *Child) attemptSpec() event.ChildSpec {
	return event.ChildSpec{ChildID: c.ID, RunID: c.CurrentRunID(), Definition: c.Definition, Input: c.Input,
		CancelPolicy: c.CancelPolicy, BuildID: c.BuildID, Patches: c.Patches, Retry: c.Retry}
}

// ChildAttempt returns the attempt of child childID of s whose run is runID: 0 for its first
// run, else the attempt (the ParentRef.Attempt that run starts with).
func ChildAttempt(s *Snapshot, childID, runID string) int {
	c, ok := s.Children[childID]
	if !ok || runID == c.RunID {
		return 0
	}
	return c.Attempt
}
