package core_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

func sideEffect(id, value string) *event.SideEffectRecorded {
	return &event.SideEffectRecorded{SideEffectID: id, Value: json.RawMessage(value)}
}

func TestCheckSideEffects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		add  []event.Payload
		want []string // rules of the violations, in order
	}{
		{"OneRecorded", []event.Payload{sideEffect("number", `7`)}, nil},
		{"TwoIDs", []event.Payload{sideEffect("number", `7`), sideEffect("stamp", `"2026-12-01"`)}, nil},
		{"RecordedTwice", []event.Payload{sideEffect("number", `7`), sideEffect("number", `8`)}, []string{"duplicate_id"}},
		{"IDOfAStep", []event.Payload{scheduled(stepSpec("number", "work", `1`)), sideEffect("number", `8`)}, []string{"duplicate_id"}},
		{"StepReusesItsID", []event.Payload{sideEffect("number", `7`), scheduled(stepSpec("number", "work", `1`))}, []string{"duplicate_id"}},
		{"NoValue", []event.Payload{&event.SideEffectRecorded{SideEffectID: "number"}}, []string{"malformed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHistory(t, "order-1", event.Spec{}).add(tt.add...)
			var rules []string
			for _, v := range core.Check("order-1", h.envs) {
				rules = append(rules, v.Rule)
			}
			require.Equal(t, tt.want, rules)
		})
	}
}

func TestValidateSideEffect(t *testing.T) {
	t.Parallel()
	s := newHistory(t, "order-1", event.Spec{}).add(sideEffect("number", `7`), scheduled(stepSpec("charge", "charge", `1`))).snapshot()
	tests := []struct {
		name    string
		d       core.RecordSideEffect
		want    event.Payload
		wantErr error
	}{
		{"New", core.RecordSideEffect{ID: "stamp", Value: json.RawMessage(` {"at": 1} `)}, sideEffect("stamp", `{"at":1}`), nil},
		{"EmptyValueIsNull", core.RecordSideEffect{ID: "stamp"}, sideEffect("stamp", `null`), nil},
		{"RecordedAgain", core.RecordSideEffect{ID: "number", Value: json.RawMessage(`7`)}, nil, core.ErrInvalidDecision},
		{"RecordedAgainOtherValue", core.RecordSideEffect{ID: "number", Value: json.RawMessage(`8`)}, nil, core.ErrInvalidDecision},
		{"IDOfAStep", core.RecordSideEffect{ID: "charge", Value: json.RawMessage(`8`)}, nil, core.ErrNonDeterminism},
		{"BadID", core.RecordSideEffect{ID: "with space", Value: json.RawMessage(`8`)}, nil, core.ErrInvalidDecision},
		{"BadValue", core.RecordSideEffect{ID: "stamp", Value: json.RawMessage(`{`)}, nil, core.ErrInvalidDecision},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := core.Validate(s, tt.d)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, []event.Payload{tt.want}, v.Events)
		})
	}
}

// A replayed side effect is compared by its ID only, and the code is offered the recorded value.
func TestReplaySideEffect(t *testing.T) {
	t.Parallel()
	h := newHistory(t, "order-1", event.Spec{}).add(sideEffect("number", `7`), &event.RunCompleted{Output: json.RawMessage(`7`)})
	var offered []string
	decider := func(id string, value string) script {
		return script{fn: func(s *core.Snapshot) core.Decision {
			if se, ok := s.SideEffects[id]; ok {
				return core.Complete{Output: se.Value}
			}
			if v, ok := s.ReplayedSideEffect(id); ok {
				offered = append(offered, string(v))
			}
			return core.RecordSideEffect{ID: id, Value: json.RawMessage(value)}
		}}
	}
	_, err := core.Replay("order-1", h.envs, decider("number", `99`), core.DecideOptions{})
	require.NoError(t, err, "another value is not a change: the recorded one is read back")
	require.Equal(t, []string{`7`}, offered, "replay offers the value the history records next")

	_, err = core.Replay("order-1", h.envs, decider("count", `7`), core.DecideOptions{})
	require.ErrorIs(t, err, core.ErrNonDeterminism)
	require.ErrorContains(t, err, "side_effect_id")
}
