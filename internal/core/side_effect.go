package core

import (
	"encoding/json"
	"fmt"

	"github.com/flowrun/flow/pkg/event"
)

// kindSideEffect is the kind of a side effect's ID, in the namespace all decision IDs share.
const kindSideEffect = "side_effect"

// RecordSideEffect records Value as the value of side effect ID (side_effect.recorded), once.
// Workflow code builds it through flow's ctx.SideEffect, which returns the recorded value
// instead once the history holds it, so a recorded side effect is never asked for again.
type RecordSideEffect struct {
	ID    string
	Value json.RawMessage
}

// SideEffect is the projection of one side_effect.recorded.
type SideEffect struct {
	ID    string          `json:"id"`
	Value json.RawMessage `json:"value"`
	Seq   uint64          `json:"seq"`
}

// sideEffect validates a RecordSideEffect decision: the ID must be valid and used by no other
// kind of decision. A side effect already recorded is never recorded again: the code reads the
// recorded value back (ctx.SideEffect does), so asking to record it again is an invalid
// decision, whatever its value; a value that differs is not a non-determinism error.
func (v validation) sideEffect(d RecordSideEffect) (Verdict, error) {
	s := v.s
	if err := event.ValidateID("side effect", d.ID); err != nil {
		return v.invalid("%v", err)
	}
	val, err := CanonicalJSON(d.Value)
	if err != nil {
		return v.invalid("side effect %q value is not valid JSON: %v", d.ID, err)
	}
	ok, err := v.recorded(kindSideEffect, d.ID)
	if err != nil {
		return Verdict{}, err
	}
	if ok {
		return v.settled("side effect %q was already recorded at seq %d, yet the workflow recorded it again; ctx.SideEffect returns the recorded value, and a new side effect needs a new ID", d.ID, s.SideEffects[d.ID].Seq)
	}
	return Verdict{Events: []event.Payload{&event.SideEffectRecorded{SideEffectID: d.ID, Value: val}}}, nil
}

// ReplayedSideEffect returns the value of side effect id when Replay is asking the code for a
// decision that the history records next as side_effect.recorded of id: the code returns that
// recorded value instead of running its function again, so a side effect runs once per run,
// never once per replay. Otherwise it returns false.
func (s *Snapshot) ReplayedSideEffect(id string) (json.RawMessage, bool) {
	if r, ok := s.ahead.(*event.SideEffectRecorded); ok && r.SideEffectID == id {
		return r.Value, true
	}
	return nil, false
}

// compareSideEffect compares a replayed side_effect.recorded with the recorded one: by ID only.
// The value is the recorded one by definition; code that computes another is not a change.
func compareSideEffect(runID string, rec *event.SideEffectRecorded, seq uint64, got *event.SideEffectRecorded) error {
	if rec.SideEffectID != got.SideEffectID {
		return mismatch(runID, kindSideEffect, rec.SideEffectID, "side_effect_id", rec.SideEffectID, got.SideEffectID, seq)
	}
	return nil
}

// describeSideEffect renders a side_effect.recorded as the code asked for it.
func describeSideEffect(p *event.SideEffectRecorded) plain {
	return plain(fmt.Sprintf("%s(%s)", p.EventType(), p.SideEffectID))
}
