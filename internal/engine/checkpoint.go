package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// Snapshot checkpoints (docs/large-payloads.md). A checkpoint is a run's snapshot at some
// sequence, encoded (core.Snapshot.MarshalCheckpoint), written by the history service alone as
// it follows the history (NewCheckpoint, when CheckpointDue says a commit crossed a boundary);
// engines only read them. It is derived, never a second truth: a cold load reads the latest
// checkpoint, checks it against the history (the commit it ends with is the run's, at the
// stream position it names, with the sequence and recorded time it names), then reads only the
// history after it; a checkpoint that is missing, of another layout, damaged or not matching
// falls back to reading the whole history.

// DefaultCheckpointEvery is the default interval of checkpoints: a run is checkpointed every
// 1,000 events, and, once its history is long, every eighth of its length (see CheckpointDue).
const DefaultCheckpointEvery = 1000

// Checkpoint is one run's snapshot checkpoint.
type Checkpoint struct {
	RunID string
	// Seq is the last event the checkpoint covers, Time its recorded time, and Position the
	// store position (stream sequence) of the commit that holds it, the commit whose last event
	// is Seq: the check a reader makes (checkCheckpoint), and where it reads on from.
	Seq      uint64
	Time     time.Time
	Position uint64
	// Snapshot is the snapshot at Seq, as core.Snapshot.MarshalCheckpoint encodes it.
	Snapshot []byte
}

// NewCheckpoint returns the checkpoint of s, a run's snapshot as of the commit at store position
// pos, which must end with event s.Seq (else readers find it does not match, and do not use it).
func NewCheckpoint(s *core.Snapshot, pos uint64) (Checkpoint, error) {
	b, err := s.MarshalCheckpoint()
	if err != nil {
		return Checkpoint{}, fmt.Errorf("encoding the checkpoint of run %q at seq %d: %w", s.RunID, s.Seq, err)
	}
	return Checkpoint{RunID: s.RunID, Seq: s.Seq, Time: s.UpdatedAt, Position: pos, Snapshot: b}, nil
}

// CheckpointReader reads the latest checkpoint of each run: internal/payload/objstore.Checkpoints
// on JetStream.
type CheckpointReader interface {
	// Latest returns run runID's checkpoint, or nil when it has none.
	Latest(ctx context.Context, runID string) (*Checkpoint, error)
}

// checkpointStore is what a store needs for checkpoints: the commit at a position, and a load of
// the messages after one (jsstore.Store).
type checkpointStore interface {
	CommitAt(ctx context.Context, runID string, pos uint64) ([]event.Envelope, error)
	LoadAfter(ctx context.Context, runID string, after, pos, atLeast uint64) ([]event.Envelope, error)
}

// checkpointInterval is the number of events between two checkpoints of a run at seq: every
// events, and every eighth of the history (rounded down to a power of two) once that is more, so
// that writing checkpoints, each of a size that grows with the run, costs a constant amount per
// event, while a cold load reads at most that many events after the latest.
func checkpointInterval(seq, every uint64) uint64 {
	if seq < 16 {
		return every
	}
	return max(every, uint64(1)<<(bits.Len64(seq)-1)/8)
}

// CheckpointDue reports whether commits that took a run from sequence prev to seq cross a
// checkpoint boundary, every events apart at least (0: DefaultCheckpointEvery).
func CheckpointDue(prev, seq, every uint64) bool {
	if every == 0 {
		every = DefaultCheckpointEvery
	}
	n := checkpointInterval(seq, every)
	return prev/n < seq/n
}

// errNoCheckpoint says a cold load found no usable checkpoint.
var errNoCheckpoint = errors.New("no usable checkpoint")

// fromCheckpoint loads run runID cold from its latest checkpoint and the history after it, up
// to at least minSeq. It returns errNoCheckpoint (with the reason, logged) when there is no
// usable checkpoint: the caller reads the whole history.
func (e *Engine) fromCheckpoint(ctx context.Context, runID string, minSeq uint64) (*core.Snapshot, []event.Envelope, error) {
	cs, ok := e.store.(checkpointStore)
	if e.checkpoints == nil || !ok {
		return nil, nil, errNoCheckpoint
	}
	cp, err := e.checkpoints.Latest(ctx, runID)
	if err != nil || cp == nil {
		if err != nil {
			e.logger.WarnContext(ctx, "checkpoint not read", slog.String("run_id", runID), slog.String("error", err.Error()))
		}
		return nil, nil, errNoCheckpoint
	}
	s, err := e.checkCheckpoint(ctx, cs, runID, cp)
	if err != nil {
		e.logger.WarnContext(ctx, "checkpoint not used; reading the whole history", slog.String("run_id", runID),
			slog.Uint64("seq", cp.Seq), slog.String("error", err.Error()))
		return nil, nil, errNoCheckpoint
	}
	tail, err := cs.LoadAfter(ctx, runID, cp.Seq, cp.Position, minSeq)
	if err != nil {
		return nil, nil, fmt.Errorf("loading run %q after its checkpoint at seq %d: %w", runID, cp.Seq, err)
	}
	return s, tail, nil
}

// checkCheckpoint decodes cp and checks it against the history: the commit at cp.Position is
// run runID's and ends with the event cp names, and the snapshot is of that event.
func (e *Engine) checkCheckpoint(ctx context.Context, cs checkpointStore, runID string, cp *Checkpoint) (*core.Snapshot, error) {
	commit, err := cs.CommitAt(ctx, runID, cp.Position)
	if err != nil {
		return nil, err
	}
	if len(commit) == 0 {
		return nil, fmt.Errorf("the commit at stream sequence %d is empty", cp.Position)
	}
	last := commit[len(commit)-1]
	if last.RunID != runID || last.Seq != cp.Seq || !last.Time.Equal(cp.Time) {
		return nil, fmt.Errorf("the commit at stream sequence %d ends with seq %d recorded at %s, not seq %d at %s",
			cp.Position, last.Seq, last.Time.Format(time.RFC3339Nano), cp.Seq, cp.Time.Format(time.RFC3339Nano))
	}
	s, err := core.UnmarshalCheckpoint(cp.Snapshot)
	if err != nil {
		return nil, err
	}
	if s.RunID != runID || s.Seq != cp.Seq || !s.UpdatedAt.Equal(cp.Time) {
		return nil, fmt.Errorf("the snapshot is of run %q at seq %d, not the checkpoint's", s.RunID, s.Seq)
	}
	return s, nil
}

// loadCheckpointed is driver.load for a run read from checkpoint s and the events after it:
// the same checks as a load of the whole history, and the same verification of the code (for
// the decisions after the checkpoint; those it covers were verified when they were decided).
func (d *driver) loadCheckpointed(ctx context.Context, s *core.Snapshot, tail []event.Envelope, minSeq uint64) error {
	e := d.e
	lastSeq, terminal := s.Seq, s.Terminal()
	if len(tail) > 0 {
		last := tail[len(tail)-1]
		lastSeq, terminal = last.Seq, last.Type().Terminal()
	}
	if err := behind(d.runID, lastSeq, terminal, minSeq); err != nil {
		return err
	}
	if err := e.runnable(d.runID, s.Spec, s.Queue); err != nil {
		return err
	}
	if e.replayer != nil && !terminal {
		_, err := core.ReplayFrom(s, tail, e.replayer, core.DecideOptions{})
		var he *core.HistoryError
		switch {
		case errors.As(err, &he):
			return err
		case err != nil:
			// Not cached: every load verifies again until code that replays the run is
			// deployed. s stopped at the decision that differs: apply the rest.
			d.replayErr = err
			for _, ev := range tail {
				if ev.Seq > s.Seq {
					if err := s.Apply(ev); err != nil {
						return err
					}
				}
			}
			d.s = s
			return nil
		}
	} else if err := s.ApplyAll(tail); err != nil {
		return err
	}
	d.s = s
	e.cache.put(d.runID, d.s, true)
	return nil
}
