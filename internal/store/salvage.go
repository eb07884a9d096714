package store

import "github.com/flowrun/flow/pkg/event"

// Salvage is what a run's stored history holds up to its first message that does not read back
// (a message that is not a commit of the run, or whose sequences do not follow the message
// before it), with the repairs (run.damage_accepted) it holds applied. It is read whether or
// not the run is quarantined.
type Salvage struct {
	RunID string
	// Commits are the commits that read back, in order: the history's readable prefix. It may
	// still break the history's invariants: project it.
	Commits []SalvagedCommit
	// Damage says why reading stopped before the run's last message (it wraps
	// event.ErrMalformed); nil when every message read back.
	Damage error
	// Last is the store position of the run's last message, whatever it holds; 0 for a run
	// without messages. A repair commits only while it is still the last.
	Last uint64
}

// SalvagedCommit is one commit of a Salvage.
type SalvagedCommit struct {
	Events []event.Envelope
	// Pos is the commit's store position (JetStream: its stream sequence).
	Pos uint64
}
