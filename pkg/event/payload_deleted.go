package event

import (
	"encoding/json"
	"errors"
	"fmt"
)

// RunDeleted records the deletion of a run's history after its retention period
// (docs/retention.md). The retention sweeper appends it once the run has ended and its events
// before it are archived, and then purges those events from the stream, which keeps this record
// alone on the run's subject: a deleted run's ID is never taken by another run, and what the
// stream lost to the purge is accounted for by Msgs. Like run.reset it follows the terminal
// event; nothing follows it.
type RunDeleted struct {
	// Reason says why the run was deleted (its retention period, and when it ended).
	Reason string `json:"reason"`
	// Archive names the archived history (an object of FLOW_ARCHIVE), "" when none is kept.
	Archive string `json:"archive,omitempty"`
	// Msgs counts the stream messages the purge deletes: every commit of the run before this one.
	Msgs uint64 `json:"msgs"`
	// Summary is the run's runs index summary when it was deleted, so that its tombstone in the
	// runs index is derived from history like every other entry.
	Summary json.RawMessage `json:"summary,omitempty"`
}

// EventType implements Payload.
func (*RunDeleted) EventType() Type { return TypeRunDeleted }

// PayloadFields implements Described: Summary is the run's own index summary, small and
// Flow's, never offloaded.
func (*RunDeleted) PayloadFields() []*json.RawMessage { return nil }

// Summarize implements Described.
func (p *RunDeleted) Summarize() string {
	archive := "not archived"
	if p.Archive != "" {
		archive = "archived as " + p.Archive
	}
	return fmt.Sprintf("deleted: %s (%s, %d commits purged)", p.Reason, archive, p.Msgs)
}

// Validate implements Payload.
func (p *RunDeleted) Validate() error {
	var msgs error
	if p.Msgs == 0 {
		msgs = fieldError("msgs", "must count the deleted commits (at least 1)")
	}
	return errors.Join(required("reason", p.Reason), msgs)
}
