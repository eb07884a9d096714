package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// The functions of this file turn inputs from outside workflow code (step results, timers,
// deliveries, operators) into the events to append, after checking them against the snapshot.
// None of them modifies the snapshot. Errors wrap the sentinels of errors.go: ErrStale and
// ErrDuplicate mean "nothing to append, and nothing went wrong".

// StepOutcome is the result of running one attempt of a step.
type StepOutcome struct {
	// Output is the attempt's JSON output when Err is nil.
	Output json.RawMessage
	// Err describes the failure.
	Err *event.ErrorInfo
	// NonRetryable is set when the error itself says it must not be retried.
	NonRetryable bool
	// Timeout names the step timeout that ended the attempt (event.TimeoutStartToClose when
	// the worker's own deadline passed); empty otherwise. Err.Kind is the same name.
	Timeout string
}

// StepResult returns the events that record the outcome of attempt of step stepID, finished at
// now: step.completed, or step.failed, which is final when the error is non-retryable or no
// attempt is left, and otherwise followed by step.retry_scheduled with the backoff's due time.
// It returns ErrStale if that attempt is not in flight any more.
func StepResult(s *Snapshot, stepID string, attempt int, out StepOutcome, now time.Time) ([]event.Payload, error) {
	st, ok := s.Steps[stepID]
	if !ok {
		return nil, fmt.Errorf("%w: step %q in run %q", ErrNotFound, stepID, s.RunID)
	}
	if s.Terminal() || st.Status != StepRunning || st.Attempt != attempt {
		return nil, fmt.Errorf("%w: step %q attempt %d of run %q is %s at attempt %d", ErrStale, stepID, attempt, s.RunID, st.Status, st.Attempt)
	}
	if out.Err != nil && st.CancelPending() {
		// The workflow asked to cancel the attempt and waits for its end (wait_cancelled).
		return cancelledAttempt(st, out), nil
	}
	if out.Err == nil {
		output, err := CanonicalJSON(out.Output)
		if err != nil {
			return nil, fmt.Errorf("%w: step %q output is not valid JSON: %w", ErrInvalidInput, stepID, err)
		}
		return []event.Payload{&event.StepCompleted{StepID: stepID, Attempt: attempt, Output: output}}, nil
	}
	e := *out.Err
	if e.Message == "" {
		e.Message = "step failed"
	}
	retryable := !out.NonRetryable && st.Retry.Retryable(e.Kind)
	final := !retryable || attempt >= st.Retry.MaxAttempts
	if retryable && final && st.Retry.OnExhaustion == event.ExhaustionPauseRun {
		// The run pauses instead: the step stays unsettled, held for a fresh attempt on unpause.
		return []event.Payload{&event.StepFailed{StepID: stepID, Attempt: attempt, Error: e, Retryable: true, Timeout: out.Timeout},
			exhaustedPause(st, attempt, e)}, nil
	}
	failed := &event.StepFailed{StepID: stepID, Attempt: attempt, Error: e, Retryable: retryable, Final: final, Timeout: out.Timeout}
	if final {
		return []event.Payload{failed}, nil
	}
	due := now.Add(st.Retry.Backoff(attempt + 1)).UTC()
	return []event.Payload{failed, &event.StepRetryScheduled{StepID: stepID, Attempt: attempt + 1, Due: due}}, nil
}

// TimerKind says what a timer resumes.
type TimerKind string

const (
	// TimerWait fires a wait (wait.fired).
	TimerWait TimerKind = "wait"
	// TimerRetry starts a retry attempt after its backoff (step.retry_fired).
	TimerRetry TimerKind = "retry"
)

// Timer is a durable deadline of a run that a scheduler must fire.
type Timer struct {
	RunID string    `json:"run_id"`
	Kind  TimerKind `json:"kind"`
	// ID is the wait ID or the step ID.
	ID string `json:"id"`
	// Attempt is the retry attempt; 0 for waits.
	Attempt int       `json:"attempt,omitempty"`
	Due     time.Time `json:"due"`
	// Seq is the sequence of the event that scheduled the timer (0 when unknown). Whoever fires
	// the timer reads the run at least this far, so that a replica lagging behind the stream's
	// leader cannot make a pending timer look moot.
	Seq uint64 `json:"seq,omitempty"`
}

// Key identifies the timer within its run: "wait.<id>", "retry.<id>.<attempt>" or
// "start.<seq>".
func (t Timer) Key() string {
	if k, ok := timeoutKey(t); ok {
		return k
	}
	switch t.Kind {
	case TimerRetry:
		return fmt.Sprintf("retry.%s.%d", t.ID, t.Attempt)
	case TimerChildRetry:
		return fmt.Sprintf("child_retry.%s.%d", t.ID, t.Attempt)
	case TimerStart:
		return "start." + t.ID
	}
	return "wait." + t.ID
}

// Timers returns the run's pending timers: unfired waits and retries waiting out a backoff.
// Its cost grows with the number of waits the run has had; call it on cold loads, not per event.
func Timers(s *Snapshot) []Timer {
	if s.Terminal() {
		return nil
	}
	ts := OwnTimers(s)
	if s.Delayed {
		ts = append(ts, startTimer(s))
	}
	ts = append(ts, timeoutTimers(s)...)
	return append(ts, childRetryTimers(s)...)
}

// OwnTimers returns the pending timers that only the run's own code waits on: unfired waits
// and retries waiting out a backoff. The run's driver fires them itself once due, in one commit
// with the decision they allow (engine, due.go); the scheduler fires them only when no driver
// did. Its cost grows with the run's waits and steps; Snapshot.TimerSeq and the pending counts
// tell when it may have changed.
func OwnTimers(s *Snapshot) []Timer {
	if s.Terminal() {
		return nil
	}
	var ts []Timer
	if s.Progress.WaitsPending > 0 {
		for _, w := range s.Waits {
			if !w.Fired {
				ts = append(ts, Timer{RunID: s.RunID, Kind: TimerWait, ID: w.ID, Due: w.Deadline, Seq: w.Seq})
			}
		}
	}
	if s.Progress.StepsRetrying > 0 {
		for _, st := range s.Steps {
			if st.Status == StepRetrying && !st.RetryDue.IsZero() {
				ts = append(ts, Timer{RunID: s.RunID, Kind: TimerRetry, ID: st.ID, Attempt: st.Attempt, Due: st.RetryDue, Seq: st.RetrySeq})
			}
		}
	}
	return ts
}

// NewTimers returns the timers that events, about to be or just committed to run runID, create.
func NewTimers(runID string, events []event.Payload) []Timer {
	var ts []Timer
	for _, p := range events {
		switch p := p.(type) {
		case *event.WaitScheduled:
			ts = append(ts, Timer{RunID: runID, Kind: TimerWait, ID: p.WaitID, Due: p.Deadline})
		case *event.StepRetryScheduled:
			ts = append(ts, Timer{RunID: runID, Kind: TimerRetry, ID: p.StepID, Attempt: p.Attempt, Due: p.Due})
		case *event.ChildRetryScheduled:
			ts = append(ts, Timer{RunID: runID, Kind: TimerChildRetry, ID: p.ChildID, Attempt: p.Attempt, Due: p.Due})
		case *event.RunStarted:
			// run.started is always sequence 1. (A run.debounced's timer is keyed by a sequence
			// the events do not carry: Derive registers it.)
			if !p.NotBefore.IsZero() {
				ts = append(ts, Timer{RunID: runID, Kind: TimerStart, ID: "1", Due: p.NotBefore, Seq: 1})
			}
			ts = append(ts, runTimeoutTimers(&Snapshot{RunID: runID, Timeouts: p.Timeouts})...)
		}
	}
	return ts
}

// Fire returns the event that fires timer t: wait.fired, step.retry_fired or run.delay_fired. It returns ErrStale
// when the timer is no longer pending (fired already, or the run ended).
func Fire(s *Snapshot, t Timer) ([]event.Payload, error) {
	if s.Terminal() {
		return nil, fmt.Errorf("%w: run %q ended; timer %s is moot", ErrStale, s.RunID, t.Key())
	}
	switch t.Kind {
	case TimerWait:
		if w, ok := s.Waits[t.ID]; ok && !w.Fired {
			return []event.Payload{&event.WaitFired{WaitID: t.ID}}, nil
		}
	case TimerRetry:
		if st, ok := s.Steps[t.ID]; ok && st.Status == StepRetrying && st.Attempt == t.Attempt && !st.RetryDue.IsZero() {
			return []event.Payload{&event.StepRetryFired{StepID: t.ID, Attempt: t.Attempt}}, nil
		}
	case TimerStart:
		return fireStart(s, t)
	case TimerRunTimeout, TimerStepStart:
		return fireTimeout(s, t)
	case TimerChildRetry:
		if events := fireChildRetry(s, t); events != nil {
			return events, nil
		}
	}
	return nil, fmt.Errorf("%w: timer %s of run %q is not pending", ErrStale, t.Key(), s.RunID)
}

// ReceiveSignal returns the event that records signal name with payload, delivered under
// deliveryID. ErrDuplicate if that delivery was recorded with the same name and payload, even
// if the run ended since; ErrDeliveryConflict if it was recorded with another; otherwise
// ErrTerminal if the run ended.
func ReceiveSignal(s *Snapshot, name string, payload json.RawMessage, deliveryID string) ([]event.Payload, error) {
	if s.Seq > 0 && deliveryID != "" && s.DeliverySeen(deliveryID) {
		if err := sameSignal(s, name, payload, deliveryID); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: signal delivery %q to run %q", ErrDuplicate, deliveryID, s.RunID)
	}
	if err := live(s); err != nil {
		return nil, err
	}
	if err := event.ValidateName("signal", name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if deliveryID == "" {
		return nil, fmt.Errorf("%w: signal %q has no delivery ID", ErrInvalidInput, name)
	}
	p, err := CanonicalJSON(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: signal %q payload is not valid JSON: %w", ErrInvalidInput, name, err)
	}
	return []event.Payload{&event.SignalReceived{Name: name, Payload: p, DeliveryID: deliveryID}}, nil
}

// ReceiveHook returns the event that records the delivery of payload to hook hookID.
// ErrDuplicate if the hook already received this delivery with this payload;
// ErrDeliveryConflict if it received this delivery ID with another payload; ErrAlreadyReceived
// if it received another delivery; ErrNotFound if the run has no such hook; ErrTerminal if the
// run ended.
func ReceiveHook(s *Snapshot, hookID string, payload json.RawMessage, deliveryID string) ([]event.Payload, error) {
	h, ok := s.Hooks[hookID]
	if ok && h.Received && h.DeliveryID == deliveryID {
		if p, err := CanonicalJSON(payload); err != nil || !bytes.Equal(p, h.Payload) {
			return nil, fmt.Errorf("%w: hook %q of run %q received delivery %q at seq %d with another payload; send a new delivery ID for a new payload",
				ErrDeliveryConflict, hookID, s.RunID, deliveryID, h.ReceivedSeq)
		}
		return nil, fmt.Errorf("%w: hook %q delivery %q", ErrDuplicate, hookID, deliveryID)
	}
	if err := live(s); err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: hook %q in run %q", ErrNotFound, hookID, s.RunID)
	}
	if deliveryID == "" {
		return nil, fmt.Errorf("%w: delivery to hook %q has no delivery ID", ErrInvalidInput, hookID)
	}
	if h.Received {
		return nil, fmt.Errorf("%w: hook %q of run %q received delivery %q at seq %d", ErrAlreadyReceived, hookID, s.RunID, h.DeliveryID, h.ReceivedSeq)
	}
	p, err := CanonicalJSON(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: hook %q payload is not valid JSON: %w", ErrInvalidInput, hookID, err)
	}
	return []event.Payload{&event.HookReceived{HookID: hookID, Payload: p, DeliveryID: deliveryID}}, nil
}

// sameSignal checks a repeated delivery against the signal recorded under its delivery ID. A
// delivery recorded by an earlier generation of a continued run is not in s.Signals: it is
// accepted as a duplicate.
func sameSignal(s *Snapshot, name string, payload json.RawMessage, deliveryID string) error {
	for _, sig := range s.Signals {
		if sig.DeliveryID != deliveryID {
			continue
		}
		p, err := CanonicalJSON(payload)
		if sig.Name != name || err != nil || !bytes.Equal(p, sig.Payload) {
			return fmt.Errorf("%w: run %q recorded delivery %q at seq %d as signal %q with another payload; send a new delivery ID for a new signal",
				ErrDeliveryConflict, s.RunID, deliveryID, sig.Seq, sig.Name)
		}
		return nil
	}
	return nil
}

// SettleChild returns the event that records how child childID ended, given the snapshot of the
// run that ended (the child run or its last continuation): child.settled, or
// child.retry_scheduled when the run failed and the child's retry policy starts another attempt.
// ErrStale if already settled, or if the run is not the child's current attempt.
func SettleChild(s *Snapshot, childID string, ended *Snapshot) ([]event.Payload, error) {
	c, ok := s.Children[childID]
	if !ok {
		return nil, fmt.Errorf("%w: child %q in run %q", ErrNotFound, childID, s.RunID)
	}
	if s.Terminal() || c.Settled {
		return nil, fmt.Errorf("%w: child %q of run %q already settled or the run ended", ErrStale, childID, s.RunID)
	}
	o := ended.Outcome
	if o == nil || o.Outcome == event.OutcomeContinuedAsNew {
		return nil, fmt.Errorf("%w: run %q has not ended", ErrInvalidInput, ended.RunID)
	}
	if retry, err := childEnded(s, c, ended); retry != nil || err != nil {
		return retry, err
	}
	settled := &event.ChildSettled{ChildID: childID, RunID: ended.RunID, Outcome: o.Outcome, Output: o.Output, Error: o.Error}
	if o.Outcome == event.OutcomeCancelled {
		settled.Error = &event.ErrorInfo{Kind: "cancelled", Message: "child run was cancelled: " + o.Reason}
	}
	return []event.Payload{settled}, nil
}

// RequestCancel returns the event that asks the run to cancel. ErrDuplicate if cancellation was
// already requested; ErrTerminal if the run ended.
func RequestCancel(s *Snapshot, reason string) ([]event.Payload, error) {
	return RequestCancelDelivery(s, reason, "")
}

// ErrCancelRequested is returned by RequestCancelDelivery when another request (another
// delivery ID, or none) asked for the run's cancellation first.
var ErrCancelRequested = errors.New("flow: cancellation was already requested")

// RequestCancelDelivery is RequestCancel under deliveryID, recorded in the event: ErrDuplicate
// if the run recorded this delivery, even if it ended since; ErrCancelRequested if another
// request asked for the cancellation first; ErrTerminal if the run ended. An empty deliveryID
// is RequestCancel.
func RequestCancelDelivery(s *Snapshot, reason, deliveryID string) ([]event.Payload, error) {
	if s.Seq > 0 && deliveryID != "" && s.DeliverySeen(deliveryID) {
		return nil, fmt.Errorf("%w: cancellation %q of run %q", ErrDuplicate, deliveryID, s.RunID)
	}
	if err := live(s); err != nil {
		return nil, err
	}
	if s.CancelRequested {
		if deliveryID != "" {
			return nil, fmt.Errorf("%w: run %q (%s)", ErrCancelRequested, s.RunID, s.CancelReason)
		}
		return nil, fmt.Errorf("%w: cancellation of run %q was already requested", ErrDuplicate, s.RunID)
	}
	return []event.Payload{&event.RunCancelRequested{Reason: reason, DeliveryID: deliveryID}}, nil
}

// Terminate returns the events that end the run as failed at an operator's request, cancelling
// every unsettled step first. ErrTerminal if the run ended.
func Terminate(s *Snapshot, reason string) ([]event.Payload, error) {
	return TerminateDelivery(s, reason, "")
}

// TerminateDelivery is Terminate under deliveryID, recorded in run.failed: ErrDuplicate if the
// run was terminated by this delivery; ErrTerminal if it ended otherwise. An empty deliveryID
// is Terminate.
func TerminateDelivery(s *Snapshot, reason, deliveryID string) ([]event.Payload, error) {
	if s.Seq > 0 && deliveryID != "" && s.DeliverySeen(deliveryID) {
		return nil, fmt.Errorf("%w: termination %q of run %q", ErrDuplicate, deliveryID, s.RunID)
	}
	if err := live(s); err != nil {
		return nil, err
	}
	if reason == "" {
		reason = "terminated by an operator"
	}
	failed := &event.RunFailed{Error: event.ErrorInfo{Kind: "terminated", Message: reason}, Cause: event.CauseOperator, DeliveryID: deliveryID}
	return endEvents(s, failed, event.CauseOperator, reason), nil
}

func live(s *Snapshot) error {
	if s.Seq == 0 {
		return fmt.Errorf("%w: run %q", ErrNotFound, s.RunID)
	}
	if s.Terminal() {
		return fmt.Errorf("%w: run %q ended (%s) at seq %d", ErrTerminal, s.RunID, s.Outcome.Outcome, s.Outcome.Seq)
	}
	return nil
}

// Attempt identifies one attempt of a step for the code that runs it.
type Attempt struct {
	RunID  string
	StepID string
	// Name is the registered step function.
	Name    string
	Attempt int
	Input   json.RawMessage
	// Timeouts are the step's recorded timeouts; nil for none.
	Timeouts *event.StepTimeouts
}

// Attempts returns the attempts in flight, in scheduling order. Its cost grows with the number
// of unsettled steps; a caller that may stop early ranges over InFlightAttempts instead.
func Attempts(s *Snapshot) []Attempt {
	out := make([]Attempt, 0, max(0, s.Progress.StepsRunning))
	for a := range InFlightAttempts(s) {
		out = append(out, a)
	}
	return out
}

// InFlightAttempts yields the attempts in flight, in scheduling order, as Attempts returns
// them. A loop over it costs what it visits: the unsettled steps up to where it stops, so that
// a caller that stops at the first attempt it cannot start yet pays for the attempts it
// started, not for the whole batch. The snapshot must not change while the loop runs.
func InFlightAttempts(s *Snapshot) iter.Seq[Attempt] {
	return func(yield func(Attempt) bool) {
		for st := s.unsettled.first; st != nil; st = st.next {
			if st.Status != StepRunning {
				continue
			}
			if !yield(Attempt{RunID: s.RunID, StepID: st.ID, Name: st.Name, Attempt: st.Attempt, Input: st.Input, Timeouts: st.Timeouts}) {
				return
			}
		}
	}
}

// ChildStartFailed returns the event that settles child childID as failed because its run could
// not be started. ErrStale if the child already settled.
func ChildStartFailed(s *Snapshot, childID string, cause event.ErrorInfo) ([]event.Payload, error) {
	c, ok := s.Children[childID]
	if !ok {
		return nil, fmt.Errorf("%w: child %q in run %q", ErrNotFound, childID, s.RunID)
	}
	if s.Terminal() || c.Settled {
		return nil, fmt.Errorf("%w: child %q of run %q already settled or the run ended", ErrStale, childID, s.RunID)
	}
	return []event.Payload{&event.ChildSettled{ChildID: childID, RunID: c.RunID, Outcome: event.OutcomeFailed, Error: &cause}}, nil
}
