package engine

import (
	"errors"
	"fmt"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// PendingLimits bound the inputs a run holds that its workflow has not taken yet: signals no
// signal wait consumed and updates not yet accepted or rejected (core.Snapshot.PendingInputs).
// A signal or update that would take a run past either limit is refused with a *PendingError,
// and nothing is appended; a repeated delivery of an input already recorded is still accepted,
// and so is a signal that a signal wait of the run awaits (it is consumed, not pending).
// The zero value bounds nothing.
type PendingLimits struct {
	// Count bounds the pending inputs of a run; 0 for no bound.
	Count int
	// Bytes bounds the bytes of their payloads, as the history holds them (an offloaded one as
	// its reference; the refused input's own payload in full, before it is offloaded); 0 for no
	// bound.
	Bytes int64
}

// ErrTooManyPending is wrapped by a *PendingError.
var ErrTooManyPending = errors.New("flow: the run has too many pending inputs")

// PendingError refuses an input to a run whose pending inputs are at a limit.
type PendingError struct {
	RunID string
	// Count and Bytes are the run's pending inputs and their bytes before the refused one.
	Count int
	Bytes int64
	// Limits are the limits the input would have crossed.
	Limits PendingLimits
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("flow: run %q holds %d inputs (%d bytes) that its workflow has not taken yet, the limit being %s; "+
		"the run is not consuming its signals or updates: check that the workflow awaits them, or send fewer", e.RunID, e.Count, e.Bytes, e.Limits)
}

func (e *PendingError) Unwrap() error { return ErrTooManyPending }

func (l PendingLimits) String() string {
	switch {
	case l.Count > 0 && l.Bytes > 0:
		return fmt.Sprintf("%d inputs or %d bytes", l.Count, l.Bytes)
	case l.Count > 0:
		return fmt.Sprintf("%d inputs", l.Count)
	}
	return fmt.Sprintf("%d bytes", l.Bytes)
}

// admit wraps compute, which derives inputs from a snapshot, to refuse the inputs that would take
// the run past l. The check runs on the snapshot the append is conditioned on, so concurrent
// writers cannot overshoot it together.
func (l PendingLimits) admit(compute func(*core.Snapshot) ([]event.Payload, error)) func(*core.Snapshot) ([]event.Payload, error) {
	if l.Count <= 0 && l.Bytes <= 0 {
		return compute
	}
	return func(s *core.Snapshot) ([]event.Payload, error) {
		events, err := compute(s)
		if err != nil {
			return events, err
		}
		k, add := 0, int64(0)
		for _, p := range events {
			switch p := p.(type) {
			case *event.SignalReceived:
				if !s.SignalAwaited(p.Name) { // else a wait takes it at once
					k, add = k+1, add+int64(len(p.Payload))
				}
			case *event.UpdateReceived:
				k, add = k+1, add+int64(len(p.Payload))
			}
		}
		if k == 0 {
			return events, nil
		}
		n, b := s.PendingInputs()
		if l.Count > 0 && n+k > l.Count || l.Bytes > 0 && b+add > l.Bytes {
			return nil, &PendingError{RunID: s.RunID, Count: n, Bytes: b, Limits: l}
		}
		return events, nil
	}
}
