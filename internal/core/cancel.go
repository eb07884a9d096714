package core

import (
	"fmt"

	"github.com/flowrun/flow/pkg/event"
)

// CancelStep cancels step ID, which the run scheduled and which has not settled, with Policy:
//
//   - try_cancel records step.cancelled at once (side_effect_unknown when an attempt is in
//     flight) and the attempt's context is cancelled; the workflow goes on at once;
//   - wait_cancelled records step.cancel_requested and the attempt's context is cancelled; the
//     step settles when the attempt ends: as cancelled when it returns an error (it reported
//     itself cancelled, or failed), as completed when it returns an output. A step waiting out
//     a retry backoff has nothing in flight and settles as cancelled at once;
//   - abandon records step.cancelled at once and leaves the attempt alone: it is not told, and
//     its result is ignored.
//
// Re-issuing it while a wait_cancelled cancellation is pending keeps the run waiting; re-issuing
// it with another policy is a non-determinism error on field cancel_policy.
type CancelStep struct {
	ID     string
	Policy event.Cancellation
}

// CancelChild cancels child ID, which the run started and which has not settled, with Policy:
// try_cancel settles the child as cancelled at once and asks its run to cancel
// (run.cancel_requested); wait_cancelled asks its run to cancel and settles the child when that
// run ends, however it ends; abandon settles the child as cancelled at once and leaves its run
// alone. A child waiting out a retry backoff has no run and settles at once under every policy.
type CancelChild struct {
	ID     string
	Policy event.Cancellation
}

func (CancelStep) decision()           {}
func (CancelChild) decision()          {}
func (d CancelStep) Describe() string  { return describe("CancelStep", d.ID) }
func (d CancelChild) Describe() string { return describe("CancelChild", d.ID) }

// CancelPending reports whether a wait_cancelled cancellation of the step waits for its attempt.
func (st *Step) CancelPending() bool { return st.CancelSeq != 0 && !st.Status.Settled() }

// CancelPending reports whether a wait_cancelled cancellation of the child waits for its run.
func (c *Child) CancelPending() bool { return c.CancelSeq != 0 && !c.Settled }

// Retrying reports whether the child waits out a retry backoff: no run of it is running.
func (c *Child) Retrying() bool { return !c.Settled && !c.RetryDue.IsZero() }

// CurrentRunID returns the run of the child's current attempt (the first run, RunID, until a
// retry started another).
func (c *Child) CurrentRunID() string {
	if c.AttemptRunID != "" {
		return c.AttemptRunID
	}
	return c.RunID
}

// Detached reports whether the attempt of step stepID that is running must not be told of
// the run's cancellations: the workflow abandoned the step (ctx.CancelStep with abandon).
func (s *Snapshot) Detached(stepID string) bool {
	st, ok := s.Steps[stepID]
	return ok && st.Cancellation == event.CancelAbandon
}

// CancelAsked reports whether the attempt attempt of step stepID, which is in flight, has been
// asked to cancel by a wait_cancelled cancellation: its context must be cancelled and its end
// settles the step.
func (s *Snapshot) CancelAsked(stepID string, attempt int) bool {
	st, ok := s.Steps[stepID]
	return ok && st.CancelPending() && st.Status == StepRunning && st.Attempt == attempt
}

// AttemptCancelled reports whether whoever runs attempt attempt of step stepID must cancel it
// (cancel its context, answer its heartbeat "cancelled"): the run's history settled the attempt
// another way (its step was cancelled with try_cancel or by the run's end, or another worker
// recorded its result), or the workflow asked to cancel it (wait_cancelled). An attempt whose
// step the workflow abandoned is never told: its result is ignored, and it runs to its end.
func (s *Snapshot) AttemptCancelled(stepID string, attempt int) bool {
	st, ok := s.Steps[stepID]
	switch {
	case !ok:
		return false
	case st.Cancellation == event.CancelAbandon:
		return false
	case s.Terminal() || st.Attempt != attempt || st.Status != StepRunning:
		return true
	}
	return st.CancelPending()
}

func cancelReason(kind, id string, p event.Cancellation) string {
	return fmt.Sprintf("%s %q cancelled by the workflow (%s)", kind, id, p)
}

// target resolves the ID a cancellation names: it must be a step or child of this run (kind).
func (v validation) target(what, kind, id string, p event.Cancellation) error {
	if err := event.ValidateID(kind, id); err != nil {
		_, err := v.invalid("%s: %v", what, err)
		return err
	}
	if !p.Valid() {
		_, err := v.invalid("%s: the policy must be try_cancel, wait_cancelled or abandon, got %q", what, p)
		return err
	}
	k, ok := v.s.ids[id]
	if !ok {
		_, err := v.invalid("%s: the run has no %s %q; cancel only a %s this run scheduled", what, kind, id, kind)
		return err
	}
	if k != kind {
		_, err := v.invalid("%s: %q is a %s of this run, not a %s", what, id, k, kind)
		return err
	}
	return nil
}

func (v validation) cancelStep(d CancelStep) (Verdict, error) {
	s := v.s
	what := d.Describe()
	if err := v.target(what, kindStep, d.ID, d.Policy); err != nil {
		return Verdict{}, err
	}
	st := s.Steps[d.ID]
	if st.CancelSeq != 0 {
		if st.Cancellation != d.Policy {
			return Verdict{}, mismatch(s.RunID, kindStep, d.ID, "cancel_policy", st.Cancellation, d.Policy, st.CancelSeq)
		}
		if !st.Status.Settled() {
			return Verdict{WaitingOn: fmt.Sprintf("cancellation of step %q (wait_cancelled)", d.ID)}, nil
		}
		return v.settled("step %q was already cancelled (%s) at seq %d and settled as %s at seq %d, yet the workflow cancelled it again; cancel a step only while it has not settled (ctx.StepSettled)", d.ID, st.Cancellation, st.CancelSeq, st.Status, st.SettledSeq)
	}
	if st.Status.Settled() {
		return v.settled("step %q already %s at seq %d: there is nothing to cancel; cancel a step only while it has not settled (ctx.StepSettled)", d.ID, st.Status, st.SettledSeq)
	}
	reason := cancelReason("step", d.ID, d.Policy)
	running := st.Status == StepRunning
	cancelled := &event.StepCancelled{Steps: []event.CancelledStep{{StepID: d.ID, Attempt: st.Attempt, SideEffectUnknown: running}},
		Reason: reason, Cause: event.CauseWorkflow, Cancellation: d.Policy}
	if d.Policy != event.CancelWait {
		return Verdict{Events: []event.Payload{cancelled}}, nil
	}
	requested := &event.StepCancelRequested{StepID: d.ID, Attempt: st.Attempt, Policy: d.Policy, Reason: reason}
	if running {
		return Verdict{Events: []event.Payload{requested}}, nil
	}
	// Waiting out a backoff: nothing is in flight, so the cancellation is done at once.
	cancelled.Reason += ": no attempt was in flight"
	return Verdict{Events: []event.Payload{requested, cancelled}}, nil
}

func (v validation) cancelChild(d CancelChild) (Verdict, error) {
	s := v.s
	what := d.Describe()
	if err := v.target(what, kindChild, d.ID, d.Policy); err != nil {
		return Verdict{}, err
	}
	c := s.Children[d.ID]
	if c.CancelSeq != 0 {
		if c.Cancellation != d.Policy {
			return Verdict{}, mismatch(s.RunID, kindChild, d.ID, "cancel_policy", c.Cancellation, d.Policy, c.CancelSeq)
		}
		if !c.Settled {
			return Verdict{WaitingOn: fmt.Sprintf("cancellation of child %q (run %q, wait_cancelled)", d.ID, c.CurrentRunID())}, nil
		}
		return v.settled("child %q was already cancelled (%s) at seq %d and settled as %s at seq %d, yet the workflow cancelled it again; cancel a child only while it has not settled (ctx.Child is nil)", d.ID, c.Cancellation, c.CancelSeq, c.Outcome, c.SettledSeq)
	}
	if c.Settled {
		return v.settled("child %q already %s at seq %d: there is nothing to cancel; cancel a child only while it has not settled (ctx.Child is nil)", d.ID, c.Outcome, c.SettledSeq)
	}
	reason := cancelReason("child", d.ID, d.Policy)
	run := c.CurrentRunID()
	if c.Retrying() {
		// No run of it runs: name the last one, which ended (a request to it changes nothing).
		run = c.EndedRunID
		reason += ": no run was running (retry backoff)"
	}
	settled := &event.ChildSettled{ChildID: d.ID, RunID: run, Outcome: event.OutcomeCancelled,
		Error: &event.ErrorInfo{Kind: "cancelled", Message: reason}, Cancellation: d.Policy}
	if d.Policy != event.CancelWait {
		return Verdict{Events: []event.Payload{settled}}, nil
	}
	requested := &event.ChildCancelRequested{ChildID: d.ID, RunID: run, Policy: d.Policy, Reason: reason}
	if !c.Retrying() {
		return Verdict{Events: []event.Payload{requested}}, nil
	}
	return Verdict{Events: []event.Payload{requested, settled}}, nil
}

// checkCancel checks the events of this file against the snapshot (see check).
func (s *Snapshot) checkCancel(e event.Envelope) error {
	switch p := e.Payload.(type) {
	case *event.StepCancelRequested:
		st, err := s.step(e, p.StepID)
		if err != nil {
			return err
		}
		if st.CancelSeq != 0 {
			return s.fail(e, "cancel_state", "step %q was already cancelled (%s) at seq %d", p.StepID, st.Cancellation, st.CancelSeq)
		}
		if p.Policy != event.CancelWait {
			return s.fail(e, "cancel_state", "step.cancel_requested records wait_cancelled only, got %q", p.Policy)
		}
		if st.Status.Settled() || st.Attempt != p.Attempt {
			return s.fail(e, "step_state", "cancellation of step %q attempt %d requested, but the step is %s at attempt %d", p.StepID, p.Attempt, st.Status, st.Attempt)
		}
	case *event.StepCancelled:
		if p.Cancellation == "" {
			return nil
		}
		for _, c := range p.Steps {
			st, ok := s.Steps[c.StepID]
			switch {
			case !ok:
				return nil // reported by check
			case p.Cancellation == event.CancelWait && !st.CancelPending():
				return s.fail(e, "cancel_order", "step %q settled by a wait_cancelled cancellation that was never requested (step.cancel_requested)", c.StepID)
			case p.Cancellation != event.CancelWait && st.CancelSeq != 0:
				return s.fail(e, "cancel_state", "step %q was already cancelled (%s) at seq %d", c.StepID, st.Cancellation, st.CancelSeq)
			}
		}
	case *event.StepFailed:
		if st, ok := s.Steps[p.StepID]; ok && st.CancelPending() && !p.Final {
			return s.fail(e, "cancel_state", "step %q attempt %d failed with a retry to come, but its cancellation was requested at seq %d: the attempt's end settles it", p.StepID, p.Attempt, st.CancelSeq)
		}
	case *event.ChildCancelRequested:
		c, ok := s.Children[p.ChildID]
		switch {
		case !ok:
			return s.fail(e, "unknown_id", "child %q was never scheduled", p.ChildID)
		case c.Settled:
			return s.fail(e, "child_state", "cancellation of child %q requested, but it already settled at seq %d", p.ChildID, c.SettledSeq)
		case c.CancelSeq != 0:
			return s.fail(e, "cancel_state", "child %q was already cancelled (%s) at seq %d", p.ChildID, c.Cancellation, c.CancelSeq)
		case p.Policy != event.CancelWait:
			return s.fail(e, "cancel_state", "child.cancel_requested records wait_cancelled only, got %q", p.Policy)
		case p.RunID != c.CurrentRunID() && !(c.Retrying() && p.RunID == c.EndedRunID):
			return s.fail(e, "child_state", "cancellation of child %q names run %q, but its run is %q", p.ChildID, p.RunID, c.CurrentRunID())
		}
	case *event.ChildSettled:
		c, ok := s.Children[p.ChildID]
		switch {
		case !ok:
			return nil // reported by check
		case p.Cancellation == event.CancelWait && !c.CancelPending():
			return s.fail(e, "cancel_order", "child %q settled by a wait_cancelled cancellation that was never requested (child.cancel_requested)", p.ChildID)
		case p.Cancellation != "" && p.Cancellation != event.CancelWait && c.CancelSeq != 0:
			return s.fail(e, "cancel_state", "child %q was already cancelled (%s) at seq %d", p.ChildID, c.Cancellation, c.CancelSeq)
		case p.Cancellation == "" && c.Retrying():
			return s.fail(e, "child_state", "child %q settled while its attempt %d waits out its retry backoff", p.ChildID, c.Attempt)
		}
	}
	return nil
}

// mutateCancel applies the events of this file, and the cancellation a step.cancelled or
// child.settled records (after mutate applied the rest of them).
func (s *Snapshot) mutateCancel(e event.Envelope) {
	switch p := e.Payload.(type) {
	case *event.StepCancelRequested:
		st := s.Steps[p.StepID]
		st.Cancellation, st.CancelSeq = p.Policy, e.Seq
		s.stepCancels++
	case *event.StepCompleted:
		s.settledCancel(p.StepID, e.Seq)
	case *event.StepFailed:
		s.settledCancel(p.StepID, e.Seq)
	case *event.StepCancelled:
		for _, c := range p.Steps {
			s.settledCancel(c.StepID, e.Seq)
		}
		if p.Cancellation == "" || p.Cancellation == event.CancelWait {
			return // wait_cancelled was recorded by its step.cancel_requested
		}
		for _, c := range p.Steps {
			st := s.Steps[c.StepID]
			st.Cancellation, st.CancelSeq = p.Cancellation, e.Seq
		}
	case *event.ChildCancelRequested:
		c := s.Children[p.ChildID]
		c.Cancellation, c.CancelSeq = p.Policy, e.Seq
	case *event.ChildSettled:
		c := s.Children[p.ChildID]
		c.RetryDue = zeroTime
		if p.Cancellation != "" && p.Cancellation != event.CancelWait {
			c.Cancellation, c.CancelSeq = p.Cancellation, e.Seq
		}
	}
}

// settledCancel counts out the pending wait_cancelled cancellation of step id if the event at seq
// settled it.
func (s *Snapshot) settledCancel(id string, seq uint64) {
	if st := s.Steps[id]; st.CancelSeq != 0 && st.Cancellation == event.CancelWait && st.SettledSeq == seq {
		s.stepCancels--
	}
}

// StepCancelsPending reports whether a step has a wait_cancelled cancellation pending, in
// constant time.
func (s *Snapshot) StepCancelsPending() bool { return s.stepCancels > 0 }

// cancelledAttempt returns the events that record the end of an attempt whose step has a
// wait_cancelled cancellation pending: step.completed for an output, else step.cancelled
// (policy wait_cancelled, the side effect known: the attempt ended and said how), never a
// retry.
func cancelledAttempt(st *Step, out StepOutcome) []event.Payload {
	reason := cancelReason("step", st.ID, event.CancelWait)
	if e := out.Err; e != nil && e.Kind != "cancelled" {
		reason += "; the attempt ended with: " + e.Error()
	}
	return []event.Payload{&event.StepCancelled{Steps: []event.CancelledStep{{StepID: st.ID, Attempt: st.Attempt}},
		Reason: reason, Cause: event.CauseWorkflow, Cancellation: event.CancelWait}}
}

// CancelUnrun returns the events that settle the step of an attempt that was asked to cancel
// (CancelAsked) and that no one runs: its worker is gone, so it is not started again.
// step.cancelled records the side effect as unknown, since the attempt may have run before its
// worker went. ErrStale if the attempt is no longer asked to cancel.
func CancelUnrun(s *Snapshot, stepID string, attempt int) ([]event.Payload, error) {
	if s.Terminal() || !s.CancelAsked(stepID, attempt) {
		return nil, fmt.Errorf("%w: step %q attempt %d of run %q has no cancellation pending", ErrStale, stepID, attempt, s.RunID)
	}
	reason := cancelReason("step", stepID, event.CancelWait) + "; its attempt was not running on any worker, so it was not started again"
	return []event.Payload{&event.StepCancelled{Steps: []event.CancelledStep{{StepID: stepID, Attempt: attempt, SideEffectUnknown: true}},
		Reason: reason, Cause: event.CauseWorkflow, Cancellation: event.CancelWait}}, nil
}

// CancelRun is a run that a commit asks to cancel: the run of a child the workflow cancelled
// with try_cancel or wait_cancelled (run.cancel_requested, with Reason).
type CancelRun struct {
	RunID, Reason string
}

// ChildCancellations returns the child runs that events, one commit, ask to cancel. A
// wait_cancelled request settled in the same commit (the child waited out a retry backoff: no
// run of it was running) asks none.
func ChildCancellations(events []event.Payload) []CancelRun {
	var runs []CancelRun
	for i, p := range events {
		switch p := p.(type) {
		case *event.ChildCancelRequested:
			settled := false
			for _, q := range events[i+1:] {
				if cs, ok := q.(*event.ChildSettled); ok && cs.ChildID == p.ChildID {
					settled = true
				}
			}
			if !settled {
				runs = append(runs, CancelRun{RunID: p.RunID, Reason: p.Reason})
			}
		case *event.ChildSettled:
			if p.Cancellation == event.CancelTry {
				runs = append(runs, CancelRun{RunID: p.RunID, Reason: p.Error.Message})
			}
		}
	}
	return runs
}

// deriveChildCancel adds to c the child runs commit asks to cancel, leaving out a
// wait_cancelled child whose run has ended since (it settled).
func deriveChildCancel(s *Snapshot, commit []event.Envelope, c *Consequences) {
	var events []event.Payload
	for _, e := range commit {
		switch p := e.Payload.(type) {
		case *event.ChildCancelRequested:
			if ch, ok := s.Children[p.ChildID]; ok && ch.Settled && ch.Cancellation == event.CancelWait && ch.SettledSeq > e.Seq {
				continue // the child's run ended: nothing to cancel
			}
			events = append(events, p)
		case *event.ChildSettled:
			events = append(events, p)
		}
	}
	c.CancelRuns = ChildCancellations(events)
}

// cancelIdentity returns what a cancellation decision's event records: the kind and ID of its
// target and the policy; ok is false for any other event.
func cancelIdentity(p event.Payload) (kind, id string, policy event.Cancellation, ok bool) {
	switch p := p.(type) {
	case *event.StepCancelled:
		if (p.Cancellation == event.CancelTry || p.Cancellation == event.CancelAbandon) && len(p.Steps) == 1 {
			return kindStep, p.Steps[0].StepID, p.Cancellation, true
		}
	case *event.StepCancelRequested:
		return kindStep, p.StepID, p.Policy, true
	case *event.ChildSettled:
		if p.Cancellation == event.CancelTry || p.Cancellation == event.CancelAbandon {
			return kindChild, p.ChildID, p.Cancellation, true
		}
	case *event.ChildCancelRequested:
		return kindChild, p.ChildID, p.Policy, true
	}
	return "", "", "", false
}
