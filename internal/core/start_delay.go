package core

import (
	"fmt"
	"strconv"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// A delayed run (run.started with NotBefore, see docs/start-policies.md) makes no decision until
// run.delay_fired: the start timer (TimerStart) that the scheduler fires once NotBefore has
// passed. run.debounced, appended while the run is delayed, replaces its input and moves
// NotBefore; the timer of the event that set the previous NotBefore becomes moot (Fire finds it
// stale), and a new one, keyed by the new event's sequence, is registered.

// TimerStart ends a run's start delay (run.delay_fired). Its ID is the sequence, in decimal, of
// the event that set the run's NotBefore.
const TimerStart TimerKind = "start"

// startTimer returns the start timer of delayed run s.
func startTimer(s *Snapshot) Timer {
	return Timer{RunID: s.RunID, Kind: TimerStart, ID: strconv.FormatUint(s.NotBeforeSeq, 10), Due: s.NotBefore, Seq: s.NotBeforeSeq}
}

// fireStart returns run.delay_fired for start timer t, or ErrStale when t is not the run's
// pending start timer (the delay fired, or run.debounced moved it).
func fireStart(s *Snapshot, t Timer) ([]event.Payload, error) {
	if s.Delayed && t.ID == strconv.FormatUint(s.NotBeforeSeq, 10) {
		return []event.Payload{&event.RunDelayFired{NotBefore: s.NotBefore}}, nil
	}
	return nil, fmt.Errorf("%w: start timer %s of run %q is not pending", ErrStale, t.Key(), s.RunID)
}

// Debounce returns the run.debounced event that collapses a start with input into delayed run
// s, moving its NotBefore to notBefore. ErrTerminal if the run ended; ErrStale if its delay
// already fired (the quiet period is over: the start needs a run of its own).
func Debounce(s *Snapshot, input []byte, notBefore time.Time, traceParent string) ([]event.Payload, error) {
	if err := live(s); err != nil {
		return nil, err
	}
	if !s.Delayed {
		return nil, fmt.Errorf("%w: run %q is past its start delay", ErrStale, s.RunID)
	}
	in, err := CanonicalJSON(input)
	if err != nil {
		return nil, fmt.Errorf("%w: the input of a debounced start is not valid JSON: %w", ErrInvalidInput, err)
	}
	if notBefore.Before(s.NotBefore) {
		notBefore = s.NotBefore // a quiet period never ends earlier than one already recorded
	}
	return []event.Payload{&event.RunDebounced{Input: in, NotBefore: notBefore.UTC(), TraceParent: traceParent, Replaces: s.NotBeforeSeq}}, nil
}

// delayedVerdict is Decide's verdict for delayed run s: no decision before its start delay
// fires, unless cancellation was requested: a run whose code never ran ends cancelled at once
// (an automatic transition, as a step's exhaustion is).
func delayedVerdict(s *Snapshot) Verdict {
	if s.CancelRequested {
		return Verdict{Events: []event.Payload{&event.RunCancelled{Reason: s.CancelReason, Cause: event.CauseCancelRequested}}}
	}
	return Verdict{WaitingOn: "start delay until " + s.NotBefore.Format(time.RFC3339Nano)}
}

// checkDelay checks the start-delay rules for e: run.debounced and run.delay_fired only while
// the run is delayed, and no decision before run.delay_fired but the cancellation of a run
// whose cancellation was requested.
func (s *Snapshot) checkDelay(e event.Envelope) error {
	switch e.Payload.(type) {
	case *event.RunDebounced, *event.RunDelayFired:
		if !s.Delayed {
			return s.fail(e, "start_delay", "%s, but the run is not delayed", e.Type())
		}
		return nil
	}
	if c, ok := e.Payload.(*event.RunCancelled); ok && c.Cause == event.CauseCancelRequested && s.CancelRequested {
		return nil // a delayed run whose cancellation was requested ends so (delayedVerdict)
	}
	if s.Delayed && isDecisionEvent(e.Payload) {
		return s.fail(e, "start_delay", "%s before run.delay_fired: a delayed run makes no decision until its delay (not before %s) fires",
			e.Type(), s.NotBefore.Format(time.RFC3339Nano))
	}
	return nil
}
