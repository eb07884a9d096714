package core

import (
	"errors"
	"fmt"

	"github.com/flowrun/flow/pkg/event"
)

// Violation is one broken history invariant.
type Violation struct {
	Seq    uint64 `json:"seq"`
	Rule   string `json:"rule"`
	Detail string `json:"detail"`
}

func (v Violation) String() string { return fmt.Sprintf("seq %d: %s: %s", v.Seq, v.Rule, v.Detail) }

// Check verifies every invariant of DESIGN 3.2 over a complete history and returns every
// violation found, in order; nil means the history is valid. Sequences run 1..n without gaps;
// run.started is first and only first; at most one terminal event, last; every step, wait,
// hook and child event refers to an ID scheduled earlier; a step settles at most once and
// nothing about it follows; unsettled steps are cancelled before the terminal event; no
// decision identity or delivery is recorded twice; an update ID is received once, accepted or
// rejected once, after it was received and in the order updates were received, and completed
// at most once, only after its acceptance (rules duplicate_delivery, unknown_id, duplicate_id,
// update_order, update_state; see update.go). After a violation the offending event is
// skipped and the count resynchronised, so that later violations are found too.
func Check(runID string, history []event.Envelope) []Violation {
	var vs []Violation
	s := New(runID)
	for _, e := range history {
		err := s.Apply(e)
		var he *HistoryError
		if err == nil || !errors.As(err, &he) {
			continue
		}
		vs = append(vs, Violation{Seq: e.Seq, Rule: he.Rule, Detail: he.Detail})
		switch {
		case he.Rule == "sequence" && e.Seq > s.Seq+1:
			s.Seq = e.Seq - 1
			if err := s.Apply(e); err != nil && errors.As(err, &he) {
				vs = append(vs, Violation{Seq: e.Seq, Rule: he.Rule, Detail: he.Detail})
				s.Seq = e.Seq
			}
		case he.Rule != "sequence":
			// Skip the event's effect but count it, so the next event is not reported too.
			s.Seq = e.Seq
		}
	}
	if s.resetEnding {
		vs = append(vs, Violation{Seq: s.Seq, Rule: "reset_order",
			Detail: "history ends after a run.reset that ends the run, without its termination"})
	}
	if s.expectRetry != "" {
		vs = append(vs, Violation{Seq: s.Seq, Rule: "retry_order",
			Detail: fmt.Sprintf("history ends after a non-final failure of step %q without its step.retry_scheduled", s.expectRetry)})
	}
	return vs
}
