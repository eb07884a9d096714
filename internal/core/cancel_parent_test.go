package core_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// A cancellation request that names the parent that asked for it (written unsigned, by whoever
// drives the parent) holds only in a child of that parent (rule cancel_parent): a worker cannot
// pass a cancellation of any run off as a parent's.
func TestCancelRequestNamingAParent(t *testing.T) {
	at := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	history := func(parent *event.ParentRef, named string) []event.Envelope {
		return []event.Envelope{
			{RunID: "kid", Seq: 1, Time: at, Payload: &event.RunStarted{Spec: event.Spec{Definition: "d"}, Input: json.RawMessage(`{}`), Seed: "s", Parent: parent}},
			{RunID: "kid", Seq: 2, Time: at, Payload: &event.RunCancelRequested{Reason: "parent ended", Parent: named}},
		}
	}
	s, err := core.Project("kid", history(&event.ParentRef{RunID: "p", ChildID: "kid"}, "p"))
	require.NoError(t, err)
	require.True(t, s.CancelRequested)

	for name, parent := range map[string]*event.ParentRef{"another parent": {RunID: "q", ChildID: "kid"}, "no parent": nil} {
		_, err := core.Project("kid", history(parent, "p"))
		var he *core.HistoryError
		require.True(t, errors.As(err, &he), "%s: %v", name, err)
		require.Equal(t, "cancel_parent", he.Rule)
		require.Equal(t, uint64(2), he.Seq)
	}
}
