package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/timerindex"
	"github.com/flowrun/flow/pkg/event"
)

// The history service owns the state it derives from history (docs/derived-state.md): the runs
// index (FLOW_RUNS), the admission queue (FLOW_QUEUE), the timer index (FLOW_TIMERS), the start
// keys (FLOW_START_KEYS), the snapshot checkpoints (FLOW_CHECKPOINTS), the hook token routes
// (FLOW_HOOKS), the parked runs (FLOW_PARKED), tombstones and the deletion of derived state. It
// writes them as it
// follows the stream; its reconciler, run by the replica that holds the retention lease every
// Config.ReconcileInterval, recomputes them from history and repairs what drifted, counting each
// repair in flow_repairs_total{state=...} and logging the run and the difference. Each repair runs
// on the run's lane, in order with the run's commits.

// reconcileBatch bounds the active runs one pass checks against their last commit; the next
// pass goes on where it stopped.
const reconcileBatch = 5000

// reconciler is the state of the reconciler between passes.
type reconciler struct {
	// mu serializes passes.
	mu sync.Mutex
	// next is the run ID the runs index pass starts after; nextTimers the one the timer
	// index's pass of active runs without entries starts at; nextCheckpoint the run whose
	// checkpoint the checkpoints' pass starts after; nextHooks the one the hook routes' pass of
	// active runs starts at.
	next, nextTimers, nextCheckpoint, nextHooks string
}

// Reconcile runs one pass of the reconciler over the states the service owns, and returns the
// repairs it made by state. The replica that holds the retention lease calls it every
// ReconcileInterval; tests call it directly.
func (s *Service) Reconcile(ctx context.Context) (map[string]int, error) {
	s.reconciler.mu.Lock()
	defer s.reconciler.mu.Unlock()
	done := map[string]int{}
	for _, state := range []struct {
		name, what string
		reconcile  func(context.Context) (int, error)
	}{
		{metrics.StateQueue, "the admission queue", s.reconcileQueue},
		{metrics.StateRunsIndex, "the runs index", s.reconcileIndex},
		{metrics.StateTimers, "the timer index", s.reconcileTimers},
		{metrics.StateStartKeys, "the start keys", s.reconcileStartKeys},
		{metrics.StateCheckpoints, "the checkpoints", s.reconcileCheckpoints},
		{metrics.StateHooks, "the hook token routes", s.reconcileHooks},
		{metrics.StateParked, "the parked runs", s.reconcileParked},
	} {
		n, err := state.reconcile(ctx)
		done[state.name] = n
		if err != nil {
			return done, fmt.Errorf("reconciling %s: %w", state.what, err)
		}
	}
	return done, nil
}

// timerBatch bounds the active runs whose timers one pass compares with their snapshots; the
// next pass goes on where it stopped.
const timerBatch = 500

// reconcileTimers brings FLOW_TIMERS in line with history: a run's entries are exactly its
// pending timers (core.Timers). Every entry of a run that ended or was deleted goes; the entries
// of up to timerBatch active runs a pass (those with entries first, then the others in turn) are
// compared with their snapshots on their lanes.
func (s *Service) reconcileTimers(ctx context.Context) (int, error) {
	byRun, err := s.retention.timers.ByRun(ctx)
	if err != nil {
		return 0, err
	}
	repairs := 0
	var check []string
	for run := range byRun {
		sum, ok := s.index.get(run)
		switch {
		case !ok:
			continue // not indexed yet: its entries are younger than the index
		case sum.Status.Terminal() || sum.Deleted != nil:
			for _, k := range byRun[run] {
				if err := s.retention.timers.Delete(ctx, k); err != nil {
					return repairs, err
				}
				repairs++
				s.repaired(ctx, metrics.StateTimers, run, "the run ended: its timer entry "+k+" was deleted")
			}
		case sum.Damaged == "":
			check = append(check, run)
		}
	}
	// Active runs without entries may have lost one: check them in turn.
	active := s.index.where(func(sum core.Summary) bool {
		return !sum.Status.Terminal() && sum.Deleted == nil && sum.Damaged == "" && byRun[sum.RunID] == nil
	})
	slices.SortFunc(active, func(a, b core.Summary) int { return cmpString(a.RunID, b.RunID) })
	start, _ := slices.BinarySearchFunc(active, s.reconciler.nextTimers, func(sum core.Summary, id string) int { return cmpString(sum.RunID, id) })
	for _, sum := range active[start:] {
		if len(check) >= timerBatch {
			break
		}
		check = append(check, sum.RunID)
		s.reconciler.nextTimers = sum.RunID
	}
	if start >= len(active) || len(check) < timerBatch {
		s.reconciler.nextTimers = ""
	}
	slices.Sort(check)
	for _, run := range check[:min(len(check), 2*timerBatch)] {
		n, err := s.repairTimers(ctx, run, byRun[run])
		if err != nil {
			return repairs, err
		}
		repairs += n
	}
	return repairs, nil
}

// repairTimers makes run runID's timer entries, have, its pending timers, on its lane, and
// returns how many entries it wrote or deleted.
func (s *Service) repairTimers(ctx context.Context, runID string, have []string) (int, error) {
	n := 0
	err := s.onLane(ctx, runID, func(ctx context.Context, l *lane) error {
		snap, err := l.latestSnapshot(ctx, runID)
		if err != nil || snap == nil {
			if errors.Is(err, store.ErrDamaged) {
				return nil
			}
			return err
		}
		want := map[string]core.Timer{}
		for _, t := range core.Timers(snap) {
			want[timerindex.Key(t)] = t
		}
		for _, k := range have {
			if _, ok := want[k]; ok {
				delete(want, k)
				continue
			}
			if err := s.retention.timers.Delete(ctx, k); err != nil {
				return err
			}
			n++
			s.repaired(ctx, metrics.StateTimers, runID, "timer entry "+k+" names no pending timer: deleted")
		}
		var missing []core.Timer
		for _, t := range want {
			missing = append(missing, t)
		}
		slices.SortFunc(missing, func(a, b core.Timer) int { return cmpString(a.Key(), b.Key()) })
		if len(missing) > 0 {
			if err := s.host.ScheduleTimers(ctx, missing); err != nil {
				return err
			}
			for _, t := range missing {
				n++
				s.repaired(ctx, metrics.StateTimers, runID, "pending timer "+t.Key()+" had no entry: registered")
			}
		}
		return nil
	})
	return n, err
}

// repaired counts and logs a repair of state for run runID.
func (s *Service) repaired(ctx context.Context, state, runID, diff string) {
	metrics.Repair(ctx, state, 1)
	s.logger.WarnContext(ctx, "derived state repaired", slog.String("state", state), slog.String("run_id", runID), slog.String("repair", diff))
}

// reconcileQueue brings FLOW_QUEUE in line with history: an entry for every run that waits for
// admission (queueEntry), none for another. The runs index tells which runs may wait (status
// queued, or paused) and which entries may be stale; each is decided on the run's own latest
// snapshot, on its lane.
func (s *Service) reconcileQueue(ctx context.Context) (int, error) {
	queued := map[string]bool{}
	runs, err := s.control.queue.Runs(ctx)
	if err != nil {
		return 0, err
	}
	for _, k := range runs {
		queued[k] = true
	}
	candidates := map[string]bool{}
	for id := range queued {
		if sum, ok := s.index.get(id); ok && sum.Status != core.StatusQueued && sum.Status != core.StatusPaused {
			candidates[id] = true // an entry of a run that no longer waits
		}
	}
	// A paused run may be waiting for admission too: its index entry says paused.
	mayWait := func(sum core.Summary) bool {
		return (sum.Status == core.StatusQueued || sum.Status == core.StatusPaused) && sum.Deleted == nil
	}
	for _, sum := range s.index.where(mayWait) {
		if !queued[sum.RunID] {
			candidates[sum.RunID] = true // a waiting run without its entry
		}
	}
	return repairEach(ctx, slices.Sorted(maps.Keys(candidates)), s.repairQueueEntry)
}

// repairEach calls repair on each of runs in turn, and returns how many of them it repaired;
// it stops at the first error.
func repairEach(ctx context.Context, runs []string, repair func(ctx context.Context, runID string) (bool, error)) (int, error) {
	repairs := 0
	for _, runID := range runs {
		fixed, err := repair(ctx, runID)
		if err != nil {
			return repairs, err
		}
		if fixed {
			repairs++
		}
	}
	return repairs, nil
}

// repairQueueEntry makes run runID's FLOW_QUEUE entry what the run's latest snapshot says, on
// its lane, and reports whether it changed it.
func (s *Service) repairQueueEntry(ctx context.Context, runID string) (bool, error) {
	fixed := false
	err := s.onLane(ctx, runID, func(ctx context.Context, l *lane) error {
		snap, err := l.latestSnapshot(ctx, runID)
		if errors.Is(err, store.ErrDamaged) {
			return nil // quarantined: an operator decides
		}
		if err != nil {
			return err
		}
		want, wanted := limits.Waiting{}, false
		if snap != nil {
			want, wanted = queueEntry(snap)
		}
		_, rev, has, err := s.control.queue.Get(ctx, runID)
		if err != nil {
			return err
		}
		switch {
		case wanted && !has:
			if err := s.control.queue.Put(ctx, want); err != nil {
				return err
			}
			fixed = true
			s.repaired(ctx, metrics.StateQueue, runID, "the run waits for admission without its queue entry: written")
		case !wanted && has:
			if err := s.control.queue.Delete(ctx, runID, rev); err != nil {
				return err
			}
			fixed = true
			s.repaired(ctx, metrics.StateQueue, runID, "the run no longer waits for admission: its queue entry was deleted")
		}
		return nil
	})
	return fixed, err
}

// reconcileIndex checks the runs index entries of active runs against their runs' last commits,
// up to reconcileBatch a pass: an entry that shows a run active whose last commit ended it, or
// that lags its history, is derived again from the whole history, with every consequence of it.
func (s *Service) reconcileIndex(ctx context.Context) (int, error) {
	active := s.index.where(func(sum core.Summary) bool {
		return !sum.Status.Terminal() && sum.Deleted == nil && sum.Damaged == ""
	})
	slices.SortFunc(active, func(a, b core.Summary) int { return cmpString(a.RunID, b.RunID) })
	start, _ := slices.BinarySearchFunc(active, s.reconciler.next, func(sum core.Summary, id string) int { return cmpString(sum.RunID, id) })
	if start < len(active) && active[start].RunID == s.reconciler.next {
		start++
	}
	if start >= len(active) {
		start = 0
	}
	batch := active[start:min(len(active), start+reconcileBatch)]
	repairs := 0
	for _, sum := range batch {
		s.reconciler.next = sum.RunID
		last, err := s.store.LastCommit(ctx, sum.RunID)
		if errors.Is(err, store.ErrDamaged) {
			continue
		}
		if err != nil {
			return repairs, err
		}
		if len(last) == 0 || !stale(sum, last) {
			continue
		}
		if err := s.onLane(ctx, sum.RunID, func(ctx context.Context, l *lane) error {
			l.cache.drop(sum.RunID)
			_, err := s.sweepRun(ctx, sum.RunID, 0, false)
			return err
		}); err != nil {
			return repairs, err
		}
		repairs++
		s.repaired(ctx, metrics.StateRunsIndex, sum.RunID, fmt.Sprintf("the entry said %s at seq %d; the run's last commit is %s at seq %d: derived again",
			sum.Status, sum.Seq, last[len(last)-1].Type(), last[len(last)-1].Seq))
	}
	return repairs, nil
}

// stale reports whether runs index entry sum, of an active run, misses what the run's last
// commit tells: the run ended, was reset or deleted.
func stale(sum core.Summary, last []event.Envelope) bool {
	for _, e := range last {
		if e.Type().Terminal() || e.Type() == event.TypeRunReset || e.Type() == event.TypeRunDeleted {
			return e.Seq > sum.Seq
		}
	}
	return false
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// latestSnapshot returns run runID's snapshot as of its latest commit, from the lane's cache
// brought up to date, or projected from its whole history; nil for a run without events or a
// deleted one. Called on the run's lane.
func (l *lane) latestSnapshot(ctx context.Context, runID string) (*core.Snapshot, error) {
	hist, err := l.s.store.LoadAtLeast(ctx, runID, 0, 1)
	if errors.Is(err, store.ErrDeleted) {
		return nil, nil
	}
	if err != nil || len(hist) == 0 {
		return nil, err
	}
	return core.Project(runID, hist)
}
