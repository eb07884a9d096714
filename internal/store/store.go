// Package store defines the event store seam: the contract every storage of run histories
// implements, and the errors it returns. Implementations live in subpackages (memstore,
// jsstore); storetest holds the conformance suite every implementation runs.
package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowrun/flow/pkg/event"
)

// ErrConflict is wrapped by the error Append returns when the run's last sequence is not the
// expected one: another writer committed first. Re-read the history and decide again.
var ErrConflict = errors.New("flow: event conflict")

// ConflictError is the error Append returns on a sequence mismatch. It matches ErrConflict.
type ConflictError struct {
	RunID string
	// Expected is the sequence the writer expected to be last.
	Expected uint64
	// Actual is the run's last committed sequence, when the store knows it.
	Actual uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("flow: event conflict on run %q: expected last seq %d, the run is at seq %d (another writer committed first; re-read and decide again)", e.RunID, e.Expected, e.Actual)
}

// Is matches ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// EventStore stores run histories: per run, an append-only sequence of events numbered 1, 2, 3...
// without gaps.
//
// Implementations are safe for concurrent use by many writers of the same run; optimistic
// concurrency (the expected sequence) decides which of them commits. Stores never keep only a
// latest snapshot: Load always returns the complete, ordered history after a sequence.
type EventStore interface {
	// Append commits events atomically as sequences expected+1..expected+len(events) of run
	// runID, all or none, and returns the last sequence committed. If the run's last sequence
	// is not expected it returns an error wrapping ErrConflict (a *ConflictError) and commits
	// nothing. expected 0 creates the run. An invalid run ID (event.ValidateDerivedRunID), an
	// empty events list, or an event whose payload is nil or fails Validate is refused with an
	// error wrapping event.ErrInvalidID or event.ErrMalformed. Append does not retain events.
	Append(ctx context.Context, runID string, expected uint64, events ...event.Event) (last uint64, err error)
	// Load returns the committed envelopes of run runID with sequence > after, in order and
	// complete. A run without events yields an empty slice and no error. The caller owns the
	// returned slice and payloads.
	Load(ctx context.Context, runID string, after uint64) ([]event.Envelope, error)
}

// CheckAppend validates the arguments of Append; implementations call it first.
func CheckAppend(runID string, events []event.Event) error {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return err
	}
	if len(events) == 0 {
		return fmt.Errorf("%w: Append to run %q with no events", event.ErrMalformed, runID)
	}
	for i, e := range events {
		if e.Payload == nil {
			return fmt.Errorf("%w: event %d of %d appended to run %q has no payload", event.ErrMalformed, i+1, len(events), runID)
		}
		if e.Time.IsZero() {
			return fmt.Errorf("%w: %s appended to run %q has no time", event.ErrMalformed, e.Payload.EventType(), runID)
		}
		if err := e.Payload.Validate(); err != nil {
			return fmt.Errorf("%w: %s appended to run %q: %w", event.ErrMalformed, e.Payload.EventType(), runID, err)
		}
	}
	return nil
}
