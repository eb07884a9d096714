package event

import (
	"encoding/json"
	"errors"
	"fmt"
)

// SideEffectRecorded records, once, the value workflow code computed for side effect
// SideEffectID (flow's ctx.SideEffect): later decisions and every replay read Value back instead
// of computing it again. The ID shares the run's namespace of decision IDs (steps, waits, signal
// waits, hooks, children).
type SideEffectRecorded struct {
	// SideEffectID is the side effect's ID in the run; Value its recorded result (JSON), which
	// every replay reads instead of running it again.
	SideEffectID string          `json:"side_effect_id"`
	Value        json.RawMessage `json:"value"`
}

// EventType implements Payload.
func (*SideEffectRecorded) EventType() Type { return TypeSideEffectRecorded }

// PayloadFields implements Described.
func (p *SideEffectRecorded) PayloadFields() []*json.RawMessage { return []*json.RawMessage{&p.Value} }

// Summarize implements Described.
func (p *SideEffectRecorded) Summarize() string {
	return fmt.Sprintf("side effect %s recorded → %s", p.SideEffectID, inline(p.Value))
}

// Validate implements Payload.
func (p *SideEffectRecorded) Validate() error {
	return errors.Join(required("side_effect_id", p.SideEffectID), requiredJSON("value", p.Value))
}
