package event

import (
	"encoding/json"
	"errors"
	"fmt"
)

// RunDamageAccepted records an operator's release of a run whose stored history was found
// damaged (a message that does not read back as a commit, a commit whose sequences do not
// follow, or events that break the history's invariants, written by hand or by a faulty
// writer): `flow resume RUN --accept-damage` or `flow terminate RUN`. The run goes on from its
// longest valid prefix, the events before this one; the run's messages after stream position
// After, up to and including Through, are void: readers skip them, and they are no part of the
// run's history. A termination of the run follows it in the same commit.
//
// It may follow a terminal event (a run whose valid prefix had ended is released as ended) and
// appear more than once. It changes nothing in the snapshot.
type RunDamageAccepted struct {
	// Reason says what was damaged: the quarantine's reason, or what the read found.
	Reason string `json:"reason"`
	// By names the operation: "resume --accept-damage" or "terminate".
	By string `json:"by,omitempty"`
	// After is the store position (the FLOW_HISTORY stream sequence) of the last message of the
	// valid prefix; Through that of the run's last message before this event's own. Through
	// equals After when nothing was voided (a history that lost its tail).
	After   uint64 `json:"after"`
	Through uint64 `json:"through"`
}

// EventType implements Payload.
func (*RunDamageAccepted) EventType() Type { return TypeRunDamageAccepted }

// PayloadFields implements Described.
func (*RunDamageAccepted) PayloadFields() []*json.RawMessage { return nil }

// Summarize implements Described.
func (p *RunDamageAccepted) Summarize() string {
	s := "damage accepted: " + p.Reason
	if p.By != "" {
		s += " (" + p.By + ")"
	}
	if p.Through > p.After {
		s += fmt.Sprintf("; stream messages %d to %d void", p.After+1, p.Through)
	}
	return s
}

// Validate implements Payload.
func (p *RunDamageAccepted) Validate() error {
	var order error
	if p.After == 0 || p.Through < p.After {
		order = fieldError("after", "must be at least 1 and at most through")
	}
	return errors.Join(required("reason", p.Reason), order)
}
