package core_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
)

// TestSnapshotPayloadFields: the walk visits each payload field of a snapshot once, and setting
// through it changes the snapshot.
func TestSnapshotPayloadFields(t *testing.T) {
	t.Parallel()
	s := &core.Snapshot{
		Outcome:     &core.Outcome{},
		Steps:       map[string]*core.Step{"a": {ID: "a"}},
		Signals:     []*core.Signal{{Name: "go"}},
		Hooks:       map[string]*core.Hook{"h": {ID: "h"}},
		Children:    map[string]*core.Child{"c": {ID: "c"}},
		Updates:     map[string]*core.Update{"u": {ID: "u"}},
		SideEffects: map[string]*core.SideEffect{"e": {ID: "e"}},
	}
	n := 0
	for raw := range s.PayloadFields() {
		n++
		*raw = json.RawMessage(fmt.Sprint(n))
	}
	require.Equal(t, 13, n)
	got := []json.RawMessage{s.Input, s.Outcome.Output, s.Outcome.Input, s.Steps["a"].Input, s.Steps["a"].Output,
		s.Signals[0].Payload, s.Hooks["h"].Metadata, s.Hooks["h"].Payload, s.Children["c"].Input, s.Children["c"].Output,
		s.Updates["u"].Payload, s.Updates["u"].Result, s.SideEffects["e"].Value}
	seen := map[string]bool{}
	for _, raw := range got {
		require.NotEmpty(t, raw)
		seen[string(raw)] = true
	}
	require.Len(t, seen, 13, "every field is set once")

	stopped := 0
	for range s.PayloadFields() {
		stopped++
		if stopped == 3 {
			break
		}
	}
	require.Equal(t, 3, stopped)
}
