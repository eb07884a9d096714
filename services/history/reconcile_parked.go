package history

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/parked"
	"github.com/flowrun/flow/internal/store"
)

// reconcileParked deletes the FLOW_PARKED entries of runs that ended or were deleted
// (core.ParkedStale): nothing dispatches them again, and their index entries would say they
// wait for a worker. The runs index picks the candidates; each is decided on the run's latest
// snapshot, on its lane, and deleted at the revision the pass read.
func (s *Service) reconcileParked(ctx context.Context) (int, error) {
	entries, err := s.parked.List(ctx)
	if err != nil {
		return 0, err
	}
	slices.SortFunc(entries, func(a, b parked.Entry) int { return cmpString(a.Key, b.Key) })
	repairs := 0
	for _, e := range entries {
		sum, ok := s.index.get(e.Key)
		if !ok || sum.Damaged != "" || !sum.Status.Terminal() && sum.Deleted == nil {
			continue
		}
		fixed, err := s.repairParked(ctx, e.Key, e.Revision)
		if err != nil {
			return repairs, fmt.Errorf("run %q: %w", e.Key, err)
		}
		repairs += fixed
	}
	return repairs, nil
}

// repairParked deletes run runID's FLOW_PARKED entry, read at revision rev, if the run ended or
// is gone, on its lane, and returns 1 if it did.
func (s *Service) repairParked(ctx context.Context, runID string, rev uint64) (int, error) {
	n := 0
	err := s.onLane(ctx, runID, func(ctx context.Context, l *lane) error {
		snap, err := l.latestSnapshot(ctx, runID)
		if errors.Is(err, store.ErrDamaged) {
			return nil
		}
		if err != nil {
			return err
		}
		if !core.ParkedStale(snap) {
			return nil
		}
		err = s.parked.Delete(ctx, runID, rev)
		if skipRevision(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("deleting the parked entry: %w", err)
		}
		n = 1
		s.repaired(ctx, metrics.StateParked, runID, "the run ended or was deleted: its parked entry was deleted")
		return nil
	})
	return n, err
}
