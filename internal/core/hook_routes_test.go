package core_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// TestHookRoutes checks the projection of hook token routes and parked entries from a run's
// history: which hooks need a route, what a route naming the run should become, and whether the
// run may be parked.
func TestHookRoutes(t *testing.T) {
	t.Parallel()
	created := func(id, token string) *event.HookCreated { return &event.HookCreated{HookID: id, Token: token} }
	received := func(id string) *event.HookReceived {
		return &event.HookReceived{HookID: id, Payload: json.RawMessage(`{}`), DeliveryID: "d-" + id}
	}
	ended := &event.RunCompleted{Output: json.RawMessage(`null`)}
	tests := []struct {
		name    string
		events  []event.Payload
		gone    bool // the run does not exist, or was deleted
		token   string
		hookID  string
		release bool
		want    core.RouteRepair
		pending []string // PendingHookRoutes, by hook ID
		stale   bool     // ParkedStale
	}{
		{name: "ActiveWaits", events: []event.Payload{created("a", "tok-a")}, token: "tok-a", hookID: "a",
			want: core.RouteKeep, pending: []string{"a"}},
		{name: "ActiveReceivedKeepsItsRoute", events: []event.Payload{created("a", "tok-a"), received("a")}, token: "tok-a", hookID: "a",
			want: core.RouteKeep},
		{name: "ActiveReleasedIsHeld", events: []event.Payload{created("a", "tok-a")}, token: "tok-a", hookID: "a", release: true,
			want: core.RouteHold, pending: []string{"a"}},
		{name: "ActiveNeverCreatedIt", events: []event.Payload{created("a", "tok-a")}, token: "tok-x", hookID: "x",
			want: core.RouteDelete, pending: []string{"a"}},
		{name: "ActiveOtherToken", events: []event.Payload{created("a", "tok-a")}, token: "tok-b", hookID: "a",
			want: core.RouteDelete, pending: []string{"a"}},
		{name: "EndedUnreleased", events: []event.Payload{created("a", "tok-a"), ended}, token: "tok-a", hookID: "a",
			want: core.RouteRelease, stale: true},
		{name: "EndedReleased", events: []event.Payload{created("a", "tok-a"), ended}, token: "tok-a", hookID: "a", release: true,
			want: core.RouteKeep, stale: true},
		{name: "EndedNeverCreatedIt", events: []event.Payload{ended}, token: "tok-a", hookID: "a", release: true,
			want: core.RouteDelete, stale: true},
		{name: "Gone", gone: true, token: "tok-a", hookID: "a", want: core.RouteDelete, stale: true},
		{name: "SeveralPendingSorted", events: []event.Payload{created("b", "tok-b"), created("a", "tok-a"), created("c", "tok-c"), received("c")},
			token: "tok-b", hookID: "b", want: core.RouteKeep, pending: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s *core.Snapshot
			if !tt.gone {
				s = newHistory(t, "r", event.Spec{}).add(tt.events...).snapshot()
			}
			require.Equal(t, tt.want, core.HookRouteRepair(s, tt.token, tt.hookID, tt.release))
			require.Equal(t, tt.stale, core.ParkedStale(s))
			if s == nil {
				return
			}
			var pending []string
			for _, h := range core.PendingHookRoutes(s) {
				pending = append(pending, h.ID)
			}
			require.Equal(t, tt.pending, pending)
		})
	}
}
