package core

import (
	"fmt"
	"strings"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// Pausing a run in the core. run.paused holds the run: from it until run.unpaused the code is
// never asked for a decision and no decision event may be recorded (a history that does is
// invalid, rule "paused"). Everything that is not a decision goes on: inputs are recorded
// (signals, hook deliveries, updates, a cancellation request, which the code answers once the
// run is unpaused), timers fire, an attempt that was running finishes and records its result
// (and its retry is scheduled, and fires, but the attempt it makes due does not start), and
// termination ends the run. run.unpaused lets the run go on: the decision that is due is made
// and the attempts in flight start.
//
// A step whose retry policy says ExhaustionPauseRun and that exhausts its attempts with a
// retryable error records a non-final step.failed followed by run.paused (cause
// step_exhausted) in place of the step.retry_scheduled that would follow with attempts left:
// the step stays unsettled and held (Step.Held). The unpause commit schedules a fresh attempt
// of each held step, due at once (step.retry_scheduled, then step.retry_fired), so that a
// replay reads the same history and the workers run it.

// Pause is the projection of a run's current pause (Snapshot.Paused).
type Pause struct {
	Reason string           `json:"reason,omitempty"`
	Cause  event.PauseCause `json:"cause"`
	By     string           `json:"by,omitempty"`
	// Seq and At are the sequence and time of the run.paused that began the pause.
	Seq uint64    `json:"seq"`
	At  time.Time `json:"at"`
	// Steps are the steps that exhausted their attempts during the pause (or caused it), in
	// order: each gets a fresh attempt when the run is unpaused.
	Steps []HeldStep `json:"steps,omitempty"`
}

// HeldStep is a step that exhausted its attempts under ExhaustionPauseRun.
type HeldStep struct {
	StepID  string          `json:"step_id"`
	Attempt int             `json:"attempt"`
	Error   event.ErrorInfo `json:"error"`
}

// Describe says why the run is paused and what unpauses it, for `flow status`, `flow runs` and
// the UI.
func (p *Pause) Describe(runID string) string {
	var b strings.Builder
	b.WriteString("paused")
	switch {
	case p.Cause == event.PauseOperator && p.By != "":
		fmt.Fprintf(&b, " by %s", p.By)
	}
	if p.Reason != "" && p.Cause == event.PauseOperator {
		b.WriteString(": " + p.Reason)
	}
	for i, h := range p.Steps {
		if i == 0 && p.Cause == event.PauseOperator || i > 0 {
			b.WriteString(";")
		} else {
			b.WriteString(":")
		}
		fmt.Fprintf(&b, " step %s exhausted %d attempt(s): %s", h.StepID, h.Attempt, h.Error.Error())
	}
	if len(p.Steps) > 0 {
		fmt.Fprintf(&b, "; fix and run `flow unpause %s`", runID)
	}
	return b.String()
}

// clone returns a deep copy of p.
func (p *Pause) clone() *Pause {
	if p == nil {
		return nil
	}
	c := *p
	c.Steps = append([]HeldStep(nil), p.Steps...)
	return &c
}

// IsPaused reports whether the run is paused and has not ended.
func (s *Snapshot) IsPaused() bool { return s.Paused != nil && s.Outcome == nil }

// PauseSeen reports whether a pause or unpause request with delivery ID id was recorded.
func (s *Snapshot) PauseSeen(id string) bool {
	_, ok := s.pauseDeliveries[id]
	return ok
}

// checkPause enforces the pause invariants: no decision of the code (nor a failed one) while
// paused; run.paused once per pause but for a step's exhaustion, which must follow that step's
// non-final failure; run.unpaused only in a paused run; a request's delivery ID recorded once.
func (s *Snapshot) checkPause(e event.Envelope) error {
	switch p := e.Payload.(type) {
	case *event.RunPaused:
		if p.DeliveryID != "" && s.PauseSeen(p.DeliveryID) {
			return s.fail(e, "duplicate_delivery", "pause request %q was already recorded", p.DeliveryID)
		}
		if p.Cause == event.PauseStepExhausted {
			st, err := s.step(e, p.StepID)
			if err != nil {
				return err
			}
			if s.expectRetry != p.StepID || st.Attempt != p.Attempt {
				return s.fail(e, "retry_order", "run.paused for step %q attempt %d does not follow a non-final failure of that attempt", p.StepID, p.Attempt)
			}
			return nil
		}
		if s.Paused != nil {
			return s.fail(e, "pause_state", "run.paused while the run is paused since seq %d", s.Paused.Seq)
		}
	case *event.RunUnpaused:
		if p.DeliveryID != "" && s.PauseSeen(p.DeliveryID) {
			return s.fail(e, "duplicate_delivery", "unpause request %q was already recorded", p.DeliveryID)
		}
		if s.Paused == nil {
			return s.fail(e, "pause_state", "run.unpaused in a run that is not paused")
		}
	default:
		if _, failed := e.Payload.(*event.DecisionFailed); (failed || isDecisionEvent(e.Payload)) && s.Paused != nil {
			return s.fail(e, "paused", "%s while the run is paused (since seq %d): a paused run decides nothing until run.unpaused", e.Type(), s.Paused.Seq)
		}
	}
	return nil
}

// mutatePause applies a checked run.paused or run.unpaused.
func (s *Snapshot) mutatePause(e event.Envelope) {
	switch d := e.Payload.(type) {
	case *event.RunPaused:
		if d.DeliveryID != "" {
			s.pauseDeliveries[d.DeliveryID] = struct{}{}
		}
		if s.Paused == nil {
			s.Paused = &Pause{Reason: d.Reason, Cause: d.Cause, By: d.By, Seq: e.Seq, At: e.Time}
		}
		if d.Cause == event.PauseStepExhausted {
			st := s.Steps[d.StepID]
			st.Held = true
			s.expectRetry = ""
			s.Paused.Steps = append(s.Paused.Steps, HeldStep{StepID: d.StepID, Attempt: d.Attempt, Error: *d.Error})
		}
		s.Pauses++
	case *event.RunUnpaused:
		if d.DeliveryID != "" {
			s.pauseDeliveries[d.DeliveryID] = struct{}{}
		}
		s.Paused = nil
	}
}

// PauseRun returns the run.paused that pauses the run at an operator's request. ErrDuplicate
// if the request's delivery ID was recorded already, or the run is paused (the request is
// accepted without effect); ErrTerminal if the run ended.
func PauseRun(s *Snapshot, reason, by, deliveryID string) ([]event.Payload, error) {
	if s.Seq > 0 && deliveryID != "" && s.PauseSeen(deliveryID) {
		return nil, fmt.Errorf("%w: pause request %q to run %q", ErrDuplicate, deliveryID, s.RunID)
	}
	if err := live(s); err != nil {
		return nil, err
	}
	if s.Paused != nil {
		return nil, fmt.Errorf("%w: run %q is paused already (since seq %d)", ErrDuplicate, s.RunID, s.Paused.Seq)
	}
	return []event.Payload{&event.RunPaused{Reason: reason, Cause: event.PauseOperator, By: by, DeliveryID: deliveryID}}, nil
}

// UnpauseRun returns the events that end the run's pause at now: run.unpaused, then, for each
// step held by its exhaustion, a fresh attempt due at once (step.retry_scheduled and
// step.retry_fired). ErrDuplicate if the request's delivery ID was recorded already, or the run
// is not paused; ErrTerminal if the run ended.
func UnpauseRun(s *Snapshot, reason, by, deliveryID string, now time.Time) ([]event.Payload, error) {
	if s.Seq > 0 && deliveryID != "" && s.PauseSeen(deliveryID) {
		return nil, fmt.Errorf("%w: unpause request %q to run %q", ErrDuplicate, deliveryID, s.RunID)
	}
	if err := live(s); err != nil {
		return nil, err
	}
	if s.Paused == nil {
		return nil, fmt.Errorf("%w: run %q is not paused", ErrDuplicate, s.RunID)
	}
	events := []event.Payload{&event.RunUnpaused{Reason: reason, By: by, DeliveryID: deliveryID,
		Paused: event.Duration(max(now.Sub(s.Paused.At), 0))}}
	for _, h := range s.Paused.Steps {
		st, ok := s.Steps[h.StepID]
		if !ok || !st.Held || st.Status != StepRetrying {
			continue
		}
		next := st.Attempt + 1
		events = append(events, &event.StepRetryScheduled{StepID: st.ID, Attempt: next, Due: now.UTC()},
			&event.StepRetryFired{StepID: st.ID, Attempt: next})
	}
	return events, nil
}

// pausedVerdict is Decide's verdict for a paused run: it waits for its unpause.
func pausedVerdict(s *Snapshot) Verdict {
	return Verdict{WaitingOn: "unpause (" + s.Paused.Describe(s.RunID) + ")"}
}

// exhaustedPause returns the run.paused that follows the non-final failure of the last attempt
// of a step whose policy pauses the run on exhaustion.
func exhaustedPause(st *Step, attempt int, e event.ErrorInfo) *event.RunPaused {
	return &event.RunPaused{Cause: event.PauseStepExhausted, StepID: st.ID, Attempt: attempt, Error: &e,
		Reason: fmt.Sprintf("step %q (%s) exhausted %d attempt(s): %s", st.ID, st.Name, attempt, e.Error())}
}
