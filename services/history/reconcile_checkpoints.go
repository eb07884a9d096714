package history

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// checkpointBatch bounds the checkpoints one pass checks against their runs' histories; the
// next pass goes on where it stopped.
const checkpointBatch = 500

// reconcileCheckpoints brings FLOW_CHECKPOINTS in line with history, up to checkpointBatch
// checkpoints a pass: the checkpoint of a run that was deleted, or has no history, goes; one
// that does not match its run's history (the commit at its position is not the run's, or does
// not end with the event it names, or its metadata do not say) is deleted and written again from
// the run's latest snapshot. Each is decided on its run's lane, in order with the lane's own
// checkpoint writes.
func (s *Service) reconcileCheckpoints(ctx context.Context) (int, error) {
	runs, err := s.retention.checkpoints.Runs(ctx)
	if err != nil {
		return 0, err
	}
	slices.Sort(runs)
	start, _ := slices.BinarySearch(runs, s.reconciler.nextCheckpoint)
	if start < len(runs) && runs[start] == s.reconciler.nextCheckpoint {
		start++
	}
	if start >= len(runs) {
		start = 0
	}
	batch := runs[start:min(len(runs), start+checkpointBatch)]
	s.reconciler.nextCheckpoint = ""
	if start+len(batch) < len(runs) {
		s.reconciler.nextCheckpoint = batch[len(batch)-1]
	}
	return repairEach(ctx, batch, s.repairCheckpoint)
}

// repairCheckpoint checks run runID's checkpoint, on its lane, and reports whether it deleted
// or replaced it.
func (s *Service) repairCheckpoint(ctx context.Context, runID string) (bool, error) {
	if _, quarantined := s.store.Damage(runID); quarantined {
		return false, nil // an operator decides; readers check what they read
	}
	fixed := false
	err := s.onLane(ctx, runID, func(ctx context.Context, l *lane) error {
		cps := s.retention.checkpoints
		cp, err := cps.Info(ctx, runID)
		malformed := errors.Is(err, objstore.ErrMalformedCheckpoint)
		switch {
		case err != nil && !malformed:
			return err
		case cp == nil && !malformed:
			return nil // deleted meanwhile
		}
		gone, err := s.runGone(ctx, runID)
		if err != nil {
			return err
		}
		if gone != "" {
			if err := cps.Delete(ctx, runID); err != nil {
				return err
			}
			fixed = true
			s.repaired(ctx, metrics.StateCheckpoints, runID, "the run "+gone+": its checkpoint was deleted")
			return nil
		}
		why := "its metadata do not say what it covers"
		if !malformed {
			if why, err = s.checkpointMismatch(ctx, runID, cp); err != nil || why == "" {
				return err
			}
		}
		if err := cps.Delete(ctx, runID); err != nil {
			return err
		}
		fixed = true
		diff := "its checkpoint does not match its history (" + why + "): deleted"
		snap, err := l.latestSnapshot(ctx, runID)
		if errors.Is(err, store.ErrDamaged) {
			s.repaired(ctx, metrics.StateCheckpoints, runID, diff)
			return nil
		}
		if err != nil {
			return err
		}
		if seq, pos, ok := s.store.Position(runID); snap != nil && ok && seq == snap.Seq {
			if err := s.writeCheckpoint(ctx, snap, pos); err != nil {
				return err
			}
			diff += fmt.Sprintf(", and written again at seq %d (stream sequence %d)", snap.Seq, pos)
		}
		s.repaired(ctx, metrics.StateCheckpoints, runID, diff)
		return nil
	})
	return fixed, err
}

// runGone says how run runID is gone ("was deleted", "has no history"), or "" when it is not.
func (s *Service) runGone(ctx context.Context, runID string) (string, error) {
	sum, indexed := s.index.get(runID)
	if indexed && sum.Deleted != nil {
		return "was deleted", nil
	}
	last, err := s.store.LastStreamSeq(ctx, runID)
	if err != nil {
		return "", err
	}
	if last == 0 {
		return "has no history", nil
	}
	return "", nil
}

// checkpointMismatch checks checkpoint cp of run runID against the history as a reader does
// (engine's checkCheckpoint, without decoding the snapshot): the commit at cp.Position must be
// the run's and end with the event cp names. It says how it does not, or "" when it does.
func (s *Service) checkpointMismatch(ctx context.Context, runID string, cp *engine.Checkpoint) (string, error) {
	commit, err := s.store.CommitAt(ctx, runID, cp.Position)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, event.ErrMalformed):
		return fmt.Sprintf("stream sequence %d holds no commit of the run: %v", cp.Position, err), nil
	case err != nil:
		return "", err
	case len(commit) == 0:
		return fmt.Sprintf("the commit at stream sequence %d is empty", cp.Position), nil
	}
	last := commit[len(commit)-1]
	if last.Seq != cp.Seq || !last.Time.Equal(cp.Time) {
		return fmt.Sprintf("the commit at stream sequence %d ends with seq %d recorded at %s, not seq %d at %s", cp.Position,
			last.Seq, last.Time.Format(time.RFC3339Nano), cp.Seq, cp.Time.Format(time.RFC3339Nano)), nil
	}
	return "", nil
}
