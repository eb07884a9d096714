package core

import (
	"encoding/json"
	"iter"
)

// PayloadFields returns the addresses of the snapshot's payload fields: the values that the
// events' payload fields (event.Described.PayloadFields) carry into it, which hold a reference
// where history holds one (docs/large-payloads.md). They are the run's input, its outcome's
// output and continue-as-new input, the steps' inputs and outputs, the signals' payloads, the
// hooks' metadata and payloads, the children's inputs and outputs, the updates' payloads and
// results and the side effects' values; in that order, the members of a map in no fixed order.
//
// The pointers are into s, and into the outcome s points to, which s may share with clones
// (Clone): a caller that sets through them copies s.Outcome first. s must not change while the
// sequence is iterated.
func (s *Snapshot) PayloadFields() iter.Seq[*json.RawMessage] {
	return func(yield func(*json.RawMessage) bool) {
		if !yield(&s.Input) {
			return
		}
		if o := s.Outcome; o != nil {
			if !yield(&o.Output) || !yield(&o.Input) {
				return
			}
		}
		for _, st := range s.Steps {
			if !yield(&st.Input) || !yield(&st.Output) {
				return
			}
		}
		for _, sig := range s.Signals {
			if !yield(&sig.Payload) {
				return
			}
		}
		for _, h := range s.Hooks {
			if !yield(&h.Metadata) || !yield(&h.Payload) {
				return
			}
		}
		for _, ch := range s.Children {
			if !yield(&ch.Input) || !yield(&ch.Output) {
				return
			}
		}
		for _, u := range s.Updates {
			if !yield(&u.Payload) || !yield(&u.Result) {
				return
			}
		}
		for _, se := range s.SideEffects {
			if !yield(&se.Value) {
				return
			}
		}
	}
}
