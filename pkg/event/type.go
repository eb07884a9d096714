package event

// Type names an event. Values are stable strings stored in every history; never reuse or rename.
type Type string

// The event catalogue. See the payload type of the same name for each event's fields.
const (
	TypeRunStarted         Type = "run.started"
	TypeStepScheduled      Type = "step.scheduled"
	TypeStepCompleted      Type = "step.completed"
	TypeStepFailed         Type = "step.failed"
	TypeStepRetryScheduled Type = "step.retry_scheduled"
	TypeStepRetryFired     Type = "step.retry_fired"
	TypeStepCancelled      Type = "step.cancelled"
	TypeWaitScheduled      Type = "wait.scheduled"
	TypeWaitFired          Type = "wait.fired"
	TypeSignalAwaited      Type = "signal.awaited"
	TypeSignalReceived     Type = "signal.received"
	TypeHookCreated        Type = "hook.created"
	TypeHookReceived       Type = "hook.received"
	TypeChildScheduled     Type = "child.scheduled"
	TypeChildSettled       Type = "child.settled"
	TypeRunCancelRequested Type = "run.cancel_requested"
	TypeDecisionFailed     Type = "decision.failed"
	TypeRunCompleted       Type = "run.completed"
	TypeRunFailed          Type = "run.failed"
	TypeRunCancelled       Type = "run.cancelled"
	TypeRunContinuedAsNew  Type = "run.continued_as_new"
	// TypeSideEffectRecorded records the value of a side effect (ctx.SideEffect) once.
	TypeSideEffectRecorded Type = "side_effect.recorded"
	// TypeAttributesUpserted records a decision that sets search attributes (payload_attributes.go).
	TypeAttributesUpserted Type = "attributes.upserted"
	TypeUpdateReceived     Type = "update.received"
	TypeUpdateAccepted     Type = "update.accepted"
	TypeUpdateRejected     Type = "update.rejected"
	TypeUpdateCompleted    Type = "update.completed"
	// TypeRunDelayFired ends a delayed run's start delay (run.started's NotBefore): the first
	// decision is due.
	TypeRunDelayFired Type = "run.delay_fired"
	// TypeRunDebounced records a debounced start collapsed into a pending delayed run: the
	// run's input becomes the latest start's and its NotBefore moves to the new quiet period's end.
	TypeRunDebounced Type = "run.debounced"
	// TypeRunAdmitted: the admission controller admitted a run under flow control.
	TypeRunAdmitted Type = "run.admitted"
	// Cancellation of one step or child, and child retries (payload_cancel.go).
	// TypeStepCancelRequested: the workflow asked, with wait_cancelled, to cancel a step whose
	// attempt is in flight; the step settles when the attempt ends.
	TypeStepCancelRequested Type = "step.cancel_requested"
	// TypeChildCancelRequested: the workflow asked, with wait_cancelled, to cancel a child; the
	// child settles when its run ends.
	TypeChildCancelRequested Type = "child.cancel_requested"
	// TypeChildRetryScheduled: a child run failed and its retry policy starts it again as a new
	// run once Due has passed.
	TypeChildRetryScheduled Type = "child.retry_scheduled"
	// TypeChildRetryFired: a child retry's backoff has elapsed; the attempt's run starts.
	TypeChildRetryFired Type = "child.retry_fired"
	// TypeRunReset is recorded in the old run of a reset: it names the new run (payload_reset.go).
	TypeRunReset Type = "run.reset"
	// TypeRunPaused and TypeRunUnpaused pause a run and end its pause (payload_pause.go).
	TypeRunPaused   Type = "run.paused"
	TypeRunUnpaused Type = "run.unpaused"
	// TypeRunDeleted records the deletion of an ended run's history (payload_deleted.go).
	TypeRunDeleted Type = "run.deleted"
	// TypeRunDamageAccepted releases a run whose stored history was found damaged: the run goes
	// on from its longest valid prefix, and the messages after it are void (payload_damage.go).
	TypeRunDamageAccepted Type = "run.damage_accepted"
)

// Terminal reports whether t ends a run. At most one terminal event appears in a history, last.
func (t Type) Terminal() bool {
	switch t {
	case TypeRunCompleted, TypeRunFailed, TypeRunCancelled, TypeRunContinuedAsNew:
		return true
	}
	return false
}

// Known reports whether t is in the catalogue.
func (t Type) Known() bool {
	_, ok := factories[t]
	return ok
}

// Types returns every catalogued type in catalogue order. The caller owns the returned slice.
func Types() []Type {
	return []Type{
		TypeRunStarted, TypeStepScheduled, TypeStepCompleted, TypeStepFailed,
		TypeStepRetryScheduled, TypeStepRetryFired, TypeStepCancelled, TypeWaitScheduled,
		TypeWaitFired, TypeSignalAwaited, TypeSignalReceived, TypeHookCreated, TypeHookReceived,
		TypeChildScheduled, TypeChildSettled, TypeRunCancelRequested, TypeDecisionFailed,
		TypeRunCompleted, TypeRunFailed, TypeRunCancelled, TypeRunContinuedAsNew,
		TypeSideEffectRecorded,
		TypeAttributesUpserted,
		TypeUpdateReceived, TypeUpdateAccepted, TypeUpdateRejected, TypeUpdateCompleted,
		TypeRunDelayFired, TypeRunDebounced,
		TypeRunAdmitted,
		TypeStepCancelRequested, TypeChildCancelRequested, TypeChildRetryScheduled, TypeChildRetryFired,
		TypeRunReset,
		TypeRunPaused, TypeRunUnpaused,
		TypeRunDeleted,
		TypeRunDamageAccepted,
	}
}

// New returns a zero payload of type t, or nil if t is not catalogued.
func New(t Type) Payload {
	f, ok := factories[t]
	if !ok {
		return nil
	}
	return f()
}

var factories = map[Type]func() Payload{
	TypeRunStarted:           func() Payload { return new(RunStarted) },
	TypeStepScheduled:        func() Payload { return new(StepScheduled) },
	TypeStepCompleted:        func() Payload { return new(StepCompleted) },
	TypeStepFailed:           func() Payload { return new(StepFailed) },
	TypeStepRetryScheduled:   func() Payload { return new(StepRetryScheduled) },
	TypeStepRetryFired:       func() Payload { return new(StepRetryFired) },
	TypeStepCancelled:        func() Payload { return new(StepCancelled) },
	TypeWaitScheduled:        func() Payload { return new(WaitScheduled) },
	TypeWaitFired:            func() Payload { return new(WaitFired) },
	TypeSignalAwaited:        func() Payload { return new(SignalAwaited) },
	TypeSignalReceived:       func() Payload { return new(SignalReceived) },
	TypeHookCreated:          func() Payload { return new(HookCreated) },
	TypeHookReceived:         func() Payload { return new(HookReceived) },
	TypeChildScheduled:       func() Payload { return new(ChildScheduled) },
	TypeChildSettled:         func() Payload { return new(ChildSettled) },
	TypeRunCancelRequested:   func() Payload { return new(RunCancelRequested) },
	TypeDecisionFailed:       func() Payload { return new(DecisionFailed) },
	TypeRunCompleted:         func() Payload { return new(RunCompleted) },
	TypeRunFailed:            func() Payload { return new(RunFailed) },
	TypeRunCancelled:         func() Payload { return new(RunCancelled) },
	TypeRunContinuedAsNew:    func() Payload { return new(RunContinuedAsNew) },
	TypeSideEffectRecorded:   func() Payload { return new(SideEffectRecorded) },
	TypeAttributesUpserted:   func() Payload { return new(AttributesUpserted) },
	TypeUpdateReceived:       func() Payload { return new(UpdateReceived) },
	TypeUpdateAccepted:       func() Payload { return new(UpdateAccepted) },
	TypeUpdateRejected:       func() Payload { return new(UpdateRejected) },
	TypeUpdateCompleted:      func() Payload { return new(UpdateCompleted) },
	TypeRunDelayFired:        func() Payload { return new(RunDelayFired) },
	TypeRunDebounced:         func() Payload { return new(RunDebounced) },
	TypeRunAdmitted:          func() Payload { return new(RunAdmitted) },
	TypeStepCancelRequested:  func() Payload { return new(StepCancelRequested) },
	TypeChildCancelRequested: func() Payload { return new(ChildCancelRequested) },
	TypeChildRetryScheduled:  func() Payload { return new(ChildRetryScheduled) },
	TypeChildRetryFired:      func() Payload { return new(ChildRetryFired) },
	TypeRunReset:             func() Payload { return new(RunReset) },
	TypeRunPaused:            func() Payload { return new(RunPaused) },
	TypeRunUnpaused:          func() Payload { return new(RunUnpaused) },
	TypeRunDeleted:           func() Payload { return new(RunDeleted) },
	TypeRunDamageAccepted:    func() Payload { return new(RunDamageAccepted) },
}
