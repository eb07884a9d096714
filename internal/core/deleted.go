package core

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// Deletion (docs/retention.md): the retention sweeper deletes an ended run's history by
// appending run.deleted, once the events before it are archived, and then purging those events
// from the stream. What the run leaves behind is a projection of that record alone: its runs
// index entry (Tombstone) and what the engine still needs to follow the run's chain to the runs
// that went on from it (DeletedSnapshot).

// Tombstone returns the runs index entry of run runID deleted by d, appended at seq (at time
// at): the run's summary when it was deleted, with Deleted set. The summary's Seq is seq,
// later than any entry of the run before. Purged is left false: the owner of the runs index
// sets it once the run's events and derived state are gone.
func Tombstone(runID string, seq uint64, at time.Time, d *event.RunDeleted) (Summary, error) {
	sum := Summary{RunID: runID}
	if len(d.Summary) > 0 {
		if err := json.Unmarshal(d.Summary, &sum); err != nil {
			return Summary{}, fmt.Errorf("%w: run %q: the summary run.deleted records does not decode: %v", ErrInvalidHistory, runID, err)
		}
	}
	if sum.RunID != runID {
		return Summary{}, fmt.Errorf("%w: run %q: run.deleted records the summary of run %q", ErrInvalidHistory, runID, sum.RunID)
	}
	sum.Seq = max(sum.Seq, seq)
	sum.Parked, sum.Damaged = "", ""
	sum.Deleted = &Deletion{At: at.UTC(), Reason: d.Reason, Archive: d.Archive, Msgs: d.Msgs}
	return sum, nil
}

// DeletedSnapshot returns what is known of deleted run runID from its run.deleted record: an
// ended run (its summary's status as its outcome) with its definition, queue and the links to
// the runs its chain went on in (its latest reset's new run, its continuation). It holds none
// of its events: it serves to follow the run's chain, never to decide or to compare starts.
func DeletedSnapshot(runID string, seq uint64, at time.Time, d *event.RunDeleted) (*Snapshot, error) {
	sum, err := Tombstone(runID, seq, at, d)
	if err != nil {
		return nil, err
	}
	s := newSized(runID, 0)
	s.Seq, s.UpdatedAt, s.StartedAt, s.DeletedSeq = seq, at.UTC(), sum.StartedAt, seq
	s.Spec.Definition, s.Spec.BuildID, s.Queue, s.Status = sum.Definition, sum.BuildID, sum.Queue, sum.Status
	o := &Outcome{Seq: sum.Seq, Time: sum.UpdatedAt, Reason: sum.Detail, SuccessorRunID: sum.ContinuedAs}
	switch sum.Status {
	case StatusCompleted:
		o.Outcome = event.OutcomeCompleted
	case StatusCancelled:
		o.Outcome = event.OutcomeCancelled
	case StatusContinuedAsNew:
		o.Outcome = event.OutcomeContinuedAsNew
	default:
		o.Outcome = event.OutcomeFailed
	}
	s.Outcome = o
	if sum.ResetTo != "" {
		s.Resets = []ResetLink{{NewRunID: sum.ResetTo}}
	}
	return s, nil
}
