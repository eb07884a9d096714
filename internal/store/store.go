// Package store defines the event store seam: the contract every storage of run histories
// implements, and the errors it returns. Implementations live in subpackages (memstore,
// jsstore); storetest holds the conformance suite every implementation runs.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/core"
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
	// without gaps. A run without events yields an empty slice and no error. The caller owns
	// the returned slice and payloads. On a replicated store Load may be answered by a replica
	// that lags: it can miss the newest commits (never a commit before one it returns). Read
	// what you were told exists with LoadAtLeast.
	Load(ctx context.Context, runID string, after uint64) ([]event.Envelope, error)
	// LoadAtLeast is Load, but the result reaches sequence atLeast whenever the run has it: a
	// replicated store reads what a lagging replica lacks from the stream's leader. Use it for
	// what a caller has been told exists (a task's sequence, a conflict's actual sequence, the
	// last event a client was shown). A run that has fewer events yields what it has.
	LoadAtLeast(ctx context.Context, runID string, after, atLeast uint64) ([]event.Envelope, error)
}

// Commit is a notice of one append to a run, as a Follower delivers it.
type Commit struct {
	RunID string
	// First and Last are the sequences of the commit's first and last events.
	First, Last uint64
	// Events decodes the commit's events. It may be called more than once.
	Events func() ([]event.Envelope, error)
}

// Follower is implemented by stores that notify of commits as any writer makes them.
type Follower interface {
	// Follow calls fn with each commit of run runID made after Follow returns, by any writer,
	// until stop is called. Notices are a fast path: they may arrive late, out of order or not
	// at all, and fn must not block; a caller that sees a gap reads the store. fn is never
	// called after stop returns.
	Follow(runID string, fn func(Commit)) (stop func(), err error)
}

// ErrBehind is wrapped by the errors of reads that fell short of a sequence the reader was told
// exists (a task's, a conflict's): the stream's leader had not yet applied what its followers
// hold, as a busy server can be. Nothing is wrong with the run; read again later.
var ErrBehind = errors.New("flow: the run's history was read short of a sequence known to exist")

// ErrDeleted is wrapped by the errors a store returns for a run whose history was deleted after
// its retention period: its events are archived (or gone), and the stream keeps only the
// record of the deletion (event.RunDeleted), so that the run's ID is never taken again. Every
// read of such a run returns it; nothing can be appended to it. See DeletedError.
var ErrDeleted = errors.New("flow: run deleted")

// DeletedError reports a run whose history was deleted. It matches ErrDeleted.
type DeletedError struct {
	RunID string
	// Seq and Time are the sequence and time of the run's run.deleted; Deletion is that record,
	// which the retention sweeper appended before purging the run's earlier events.
	Seq      uint64
	Time     time.Time
	Deletion *event.RunDeleted
	// StreamSeq is the record's position in the stream, when the store knows it (0 if not).
	StreamSeq uint64
}

func (e *DeletedError) Error() string {
	msg := fmt.Sprintf("flow: run %q was deleted", e.RunID)
	if !e.Time.IsZero() {
		msg += " at " + e.Time.UTC().Format(time.RFC3339)
	}
	if d := e.Deletion; d != nil {
		msg += " (" + d.Reason + ")"
		if d.Archive != "" {
			msg += "; its history is archived as " + d.Archive + ": read it with `flow history " + e.RunID + "`"
		} else {
			msg += " and not archived"
		}
	}
	return msg
}

// Is matches ErrDeleted.
func (e *DeletedError) Is(target error) bool { return target == ErrDeleted }

// ErrDamaged is wrapped by the errors a store returns for a run whose stored history was found
// damaged (lost or truncated by a disk or a server crash, or holding messages that are not its
// history, written by hand or by a faulty writer): serving it as if nothing happened would run
// its lost steps again, or act on events nobody decided. See DamagedError, which a quarantined
// run gets. It is core.ErrDamaged, which the SDK re-exports.
var ErrDamaged = core.ErrDamaged

// DamagedError reports a run whose history was found damaged. It matches ErrDamaged.
type DamagedError struct {
	RunID string
	// Reason says what was found, and where.
	Reason string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("flow: the history of run %q is damaged (%s); Flow will not drive or serve it as if it were whole: "+
		"restore the stream from a backup, or, after checking the run (`flow status %s` shows how far its history is valid), "+
		"accept the damage with `flow resume %s --accept-damage`, which drives it on from its longest valid prefix, "+
		"or end it there with `flow terminate %s`", e.RunID, e.Reason, e.RunID, e.RunID, e.RunID)
}

// Is matches ErrDamaged.
func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

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

// Positioner is implemented by stores that know where in their storage a run's last commit
// sits (JetStream: its message's stream sequence), so that a reader given a run's history by
// its writer (a resume task that carries it) can append after it without reading it first.
type Positioner interface {
	// Position returns the run sequence of the last commit of run runID this store appended or
	// read, and that commit's position; ok is false when the store has seen none.
	Position(runID string) (runSeq, pos uint64, ok bool)
	// ObservePosition records that the commit of run runID ending at run sequence runSeq sits at pos, as
	// if this store had read it. Observing a stale position is safe: an append after it
	// conflicts if the run moved on.
	ObservePosition(runID string, runSeq, pos uint64)
}
