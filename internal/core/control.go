package core

import (
	"fmt"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// Flow control in the core: a run whose run.started records a control (event.FlowControl) is
// queued until run.admitted is committed. Before that its code is never asked for a decision,
// and no decision event may be recorded (a history that does is invalid, rule "not_admitted");
// it may still receive inputs (signals are buffered), be cancelled, or be terminated.

// A reset run under flow control (reset_from.readmit) is admitted anew: the old run's
// run.admitted, copied with the prefix, does not admit it, so that a reset takes a slot and a
// rate token like any start and never runs beside its limit. Until its own run.admitted it is
// queued like a new run, with the copied decisions replayed but nothing new decided and no
// copied attempt run. Resets recorded before readmit existed kept the copied admission.

// readmits reports whether the run.admitted at seq is a copy that does not admit the run.
func (s *Snapshot) readmits(seq uint64) bool {
	return s.ResetFrom != nil && s.ResetFrom.Readmit && s.Copied(seq)
}

// Queued reports whether the run started under flow control and is not admitted yet, and has
// not ended.
func (s *Snapshot) Queued() bool { return s.Control != nil && !s.Admitted && s.Outcome == nil }

// QueuedReason says why a queued run waits, for `flow status`, `flow runs` and the UI.
func (s *Snapshot) QueuedReason() string {
	if s.Control == nil {
		return ""
	}
	return "waiting for admission under flow control (" + s.Control.Describe() + ")"
}

// checkAdmission enforces the admission invariants: run.admitted only in a run with flow control,
// once; no decision of the code (nor its completion) before it.
func (s *Snapshot) checkAdmission(e event.Envelope) error {
	switch e.Payload.(type) {
	case *event.RunAdmitted:
		if s.Control == nil {
			return s.fail(e, "not_controlled", "run.admitted in a run whose run.started records no flow control")
		}
		if s.Admitted {
			return s.fail(e, "duplicate_admission", "run.admitted again; the run was admitted at seq %d", s.AdmittedSeq)
		}
	case *event.RunCancelled, *event.RunFailed, *event.StepCancelled:
		// A queued run may be cancelled or terminated.
	default:
		if _, failed := e.Payload.(*event.DecisionFailed); (failed || isDecisionEvent(e.Payload)) && s.Queued() && !s.Copied(e.Seq) {
			return s.fail(e, "not_admitted", "%s before run.admitted: a run under flow control decides only once admitted", e.Type())
		}
	}
	return nil
}

// queuedVerdict is Decide's verdict for a queued run: the run keeps waiting for its admission,
// unless its cancellation was requested, which ends it at once (it holds no slot and ran
// nothing new). A reset run waiting to be admitted anew may hold steps its copy left unsettled:
// they are cancelled first, as any run's are.
func queuedVerdict(s *Snapshot) (Verdict, error) {
	if s.CancelRequested {
		reason := "cancellation requested while waiting for admission"
		if s.CancelReason != "" {
			reason += ": " + s.CancelReason
		}
		return Verdict{Events: endEvents(s, &event.RunCancelled{Reason: reason, Cause: event.CauseCancelRequested}, event.CauseCancelRequested, reason)}, nil
	}
	return Verdict{WaitingOn: "admission"}, nil
}

// ErrAdmitted is wrapped by Admit's error for a run that was admitted already and has not
// ended: it holds its slot. It wraps ErrStale.
var ErrAdmitted = fmt.Errorf("%w: the run was admitted already", ErrStale)

// Admit returns run.admitted for a queued run, waited since its start until at. It returns an
// error wrapping ErrAdmitted when the run was admitted already and has not ended, ErrStale and
// ErrTerminal when it ended (admitted or not: an ended run holds no slot), ErrStale when it
// needs no admission (its cancellation was requested before one: it ends without running),
// ErrNotFound when it has not started, and ErrInvalidInput when it has no flow control.
func Admit(s *Snapshot, at time.Time) ([]event.Payload, error) {
	if err := live(s); err != nil {
		if s.Terminal() {
			return nil, fmt.Errorf("%w: %w", ErrStale, err)
		}
		return nil, err
	}
	if s.Admitted {
		return nil, fmt.Errorf("%w: run %q at seq %d", ErrAdmitted, s.RunID, s.AdmittedSeq)
	}
	switch {
	case s.Control == nil:
		return nil, fmt.Errorf("%w: run %q started without flow control; there is nothing to admit", ErrInvalidInput, s.RunID)
	case s.CancelRequested:
		return nil, fmt.Errorf("%w: run %q is being cancelled; it ends without admission", ErrStale, s.RunID)
	case s.Delayed:
		// A delayed start is admitted once its delay fired (run.delay_fired), not before.
		return nil, fmt.Errorf("%w: run %q waits out its start delay until %s", ErrStale, s.RunID, s.NotBefore.Format(time.RFC3339Nano))
	}
	return []event.Payload{&event.RunAdmitted{Group: s.Control.Group, Key: s.Control.Key,
		Queued: event.Duration(max(at.Sub(s.StartedAt), 0))}}, nil
}

// CancelByControl returns the events that end a run because its flow control cancelled it: the
// unsettled steps' step.cancelled, then run.cancelled, both with cause flow_control.
func CancelByControl(s *Snapshot, reason string) ([]event.Payload, error) {
	if err := live(s); err != nil {
		return nil, err
	}
	return endEvents(s, &event.RunCancelled{Reason: reason, Cause: event.CauseFlowControl}, event.CauseFlowControl, reason), nil
}
