package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/store"
)

// hookBatch bounds the active runs whose routes and pending hooks one pass compares with their
// snapshots; the next pass goes on where it stopped.
const hookBatch = 500

// defaultHookClaimGrace is how long a route that names a live run without the hook is left
// alone: a worker claims a token before it commits the hook.created, and a claim younger than
// this may still be followed by its commit.
const defaultHookClaimGrace = 5 * time.Minute

// route is one FLOW_HOOKS entry as a pass read it.
type route struct {
	token string
	jshost.HookRoute
	rev     uint64
	created time.Time
}

// reconcileHooks brings FLOW_HOOKS in line with history (core.HookRouteRepair,
// core.PendingHookRoutes): every route names a run that created the hook under that token,
// released once the run ended, and every hook an active run waits on has its route. Each pass
// checks the runs named by routes that look wrong from the runs index (an ended run's route not
// released, a deleted or unknown run's route), and up to hookBatch active runs in turn, each on
// its lane.
func (s *Service) reconcileHooks(ctx context.Context) (int, error) {
	byRun := map[string][]route{}
	entries, err := s.retention.hooks.List(ctx)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		r := route{token: e.Key, HookRoute: e.Value, rev: e.Revision, created: e.Created}
		if e.Err != nil || r.RunID == "" {
			continue // not a route this service wrote; left for an operator
		}
		byRun[r.RunID] = append(byRun[r.RunID], r)
	}
	check := map[string]bool{}
	for run, routes := range byRun {
		sum, ok := s.index.get(run)
		switch {
		case !ok || sum.Deleted != nil:
			check[run] = true
		case sum.Damaged != "":
		case sum.Status.Terminal():
			if slices.ContainsFunc(routes, func(r route) bool { return !r.Released }) {
				check[run] = true
			}
		}
	}
	// Active runs, in turn: a route may name one that never created its hook, and one may wait
	// on a hook without a route.
	active := s.index.where(func(sum core.Summary) bool {
		return !sum.Status.Terminal() && sum.Deleted == nil && sum.Damaged == ""
	})
	slices.SortFunc(active, func(a, b core.Summary) int { return cmpString(a.RunID, b.RunID) })
	start, _ := slices.BinarySearchFunc(active, s.reconciler.nextHooks, func(sum core.Summary, id string) int { return cmpString(sum.RunID, id) })
	n := 0
	for _, sum := range active[start:] {
		if n >= hookBatch {
			break
		}
		check[sum.RunID] = true
		s.reconciler.nextHooks = sum.RunID
		n++
	}
	if n < hookBatch {
		s.reconciler.nextHooks = ""
	}
	repairs := 0
	for _, run := range slices.Sorted(maps.Keys(check)) {
		n, err := s.repairHooks(ctx, run, byRun[run])
		repairs += n
		if err != nil {
			return repairs, fmt.Errorf("run %q: %w", run, err)
		}
	}
	return repairs, nil
}

// repairHooks makes the routes that name run runID, have, and the routes of the hooks it waits
// on what its latest snapshot says, on its lane, and returns how many it wrote or deleted.
func (s *Service) repairHooks(ctx context.Context, runID string, have []route) (int, error) {
	n := 0
	err := s.onLane(ctx, runID, func(ctx context.Context, l *lane) error {
		hist, err := s.store.LoadAtLeast(ctx, runID, 0, 1)
		var snap *core.Snapshot
		deleted := false
		switch {
		case errors.Is(err, store.ErrDamaged):
			return nil // quarantined: an operator decides
		case errors.Is(err, store.ErrDeleted):
			deleted = true
		case errors.Is(err, core.ErrNotFound):
		case err != nil:
			return err
		case len(hist) > 0:
			if snap, err = core.Project(runID, hist); err != nil {
				return err
			}
		}
		for _, r := range have {
			fixed, err := s.repairRoute(ctx, snap, deleted, runID, r)
			if err != nil {
				return err
			}
			n += fixed
		}
		if snap == nil {
			return nil
		}
		for _, h := range core.PendingHookRoutes(snap) {
			fixed, err := s.routePending(ctx, snap, h)
			if err != nil {
				return err
			}
			n += fixed
		}
		return nil
	})
	return n, err
}

// repairRoute makes route r, which names run runID (whose latest snapshot is snap, nil for a
// run that was deleted or does not exist), what history says; a write is made at the revision
// the pass read, so that a route changed since (a claim, a release) is left to the next pass.
// A route younger than the claim grace that names a live run without the hook, or a run not
// found, is left alone: its claim's hook.created may be committed yet.
func (s *Service) repairRoute(ctx context.Context, snap *core.Snapshot, deleted bool, runID string, r route) (int, error) {
	kv := s.retention.hooks
	switch core.HookRouteRepair(snap, r.token, r.HookID, r.Released) {
	case core.RouteDelete:
		mayCommit := snap == nil && !deleted || snap != nil && !snap.Terminal()
		if mayCommit && time.Since(r.created) < s.hookClaimGrace {
			return 0, nil
		}
		err := kv.Delete(ctx, r.token, r.rev)
		if skipRevision(err) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("deleting the route of hook token %q: %w", r.token, err)
		}
		why := "the run does not exist"
		switch {
		case deleted:
			why = "the run was deleted"
		case snap != nil:
			why = "the run never created that hook under this token"
		}
		s.repaired(ctx, metrics.StateHooks, runID, fmt.Sprintf("hook token %q routed to hook %q: %s; the route was deleted", r.token, r.HookID, why))
		return 1, nil
	case core.RouteRelease, core.RouteHold:
		want := r.HookRoute
		want.Released = snap.Terminal()
		_, err := kv.Update(ctx, r.token, want, r.rev)
		if skipRevision(err) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("updating the route of hook token %q: %w", r.token, err)
		}
		what := "the run ended and its route was not released: released"
		if !want.Released {
			what = "the run waits on the hook and its route was released: held again"
		}
		s.repaired(ctx, metrics.StateHooks, runID, fmt.Sprintf("hook token %q of hook %q: %s", r.token, r.HookID, what))
		return 1, nil
	}
	return 0, nil
}

// routePending makes the token of hook h, which active run snap waits on, route to it
// (engine.ClaimHook: created, or taken over from a run that ended). A token a live run's other
// hook holds is logged, not repaired: history alone cannot tell which of the two keeps it.
func (s *Service) routePending(ctx context.Context, snap *core.Snapshot, h core.Hook) (int, error) {
	e, found, err := s.retention.hooks.Get(ctx, h.Token)
	switch {
	case errors.Is(err, jetstream.ErrInvalidKey):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading the route of hook token %q: %w", h.Token, err)
	case found:
		if r := e.Value; e.Err == nil && r.RunID == snap.RunID && r.HookID == h.ID {
			return 0, nil // repairRoute holds a released one
		}
	}
	err = s.engine.ClaimHook(ctx, h.Token, snap.RunID, h.ID)
	var taken *engine.TokenTakenError
	if errors.As(err, &taken) {
		s.logger.WarnContext(ctx, "a hook's token routes to another live run's hook; not repaired", slog.String("run_id", snap.RunID),
			slog.String("hook_id", h.ID), slog.String("token", h.Token), slog.String("routes_to_run", taken.RunID),
			slog.String("routes_to_hook", taken.HookID))
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("routing hook token %q: %w", h.Token, err)
	}
	s.repaired(ctx, metrics.StateHooks, snap.RunID, fmt.Sprintf("hook %q waits on token %q, which had no route to it: routed", h.ID, h.Token))
	return 1, nil
}

// skipRevision reports whether err is a write at a revision that is no longer the entry's (or
// to an entry gone): the entry changed since the pass read it, and the next pass looks again.
func skipRevision(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyNotFound)
}
