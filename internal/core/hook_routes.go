package core

import "slices"

// Hook token routes (FLOW_HOOKS: token -> run, hook, released) and parked runs (FLOW_PARKED)
// are derived state the history service owns (docs/derived-state.md). What history says each
// should hold:
//
//   - every hook an active run waits on (created, not received) has its token routed to it,
//     unreleased (PendingHookRoutes);
//   - a route naming a run says what that run's history says of the hook (HookRouteRepair): kept
//     while the run is active and created the hook under that token (received or not), released
//     once the run ended (a late redelivery is then answered as the duplicate it is, until another
//     run's hook takes the token over), deleted when the run never created the hook under that
//     token or is gone;
//   - no ended or deleted run is parked (ParkedStale).

// RouteRepair is what a hook route should become, given the history of the run it names.
type RouteRepair int

const (
	// RouteKeep: the route is what history says.
	RouteKeep RouteRepair = iota
	// RouteRelease: the run ended; its route stays, released.
	RouteRelease
	// RouteHold: the run is active and created the hook; its route is not released.
	RouteHold
	// RouteDelete: the run never created the hook under the token, or is gone (s is nil).
	RouteDelete
)

func (r RouteRepair) String() string {
	switch r {
	case RouteKeep:
		return "keep"
	case RouteRelease:
		return "release"
	case RouteHold:
		return "hold"
	case RouteDelete:
		return "delete"
	}
	return "unknown"
}

// HookRouteRepair decides the route of token to hook hookID of run s.RunID, released or not,
// against the run's latest snapshot s; nil stands for a run that does not exist or was deleted.
// A route that names a live run without the hook may be a claim whose hook.created is not
// committed yet: the caller leaves a young one alone.
func HookRouteRepair(s *Snapshot, token, hookID string, released bool) RouteRepair {
	if s == nil {
		return RouteDelete
	}
	h, ok := s.Hooks[hookID]
	switch {
	case !ok || h.Token != token:
		return RouteDelete
	case s.Terminal() && !released:
		return RouteRelease
	case !s.Terminal() && released:
		return RouteHold
	}
	return RouteKeep
}

// PendingHookRoutes returns the hooks whose tokens must route to run s, sorted by hook ID: the
// hooks an active run created and has not received a delivery for; none for an ended run.
func PendingHookRoutes(s *Snapshot) []Hook {
	if s.Terminal() {
		return nil
	}
	var out []Hook
	for _, h := range s.Hooks {
		if !h.Received {
			out = append(out, *h)
		}
	}
	slices.SortFunc(out, func(a, b Hook) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// ParkedStale reports whether run s may not be parked: it ended, or it is gone (s is nil).
func ParkedStale(s *Snapshot) bool {
	return s == nil || s.Terminal()
}
