package history

import (
	"context"
	"log/slog"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
)

// The history service is the one writer of FLOW_CHECKPOINTS (docs/large-payloads.md): it writes
// a run's snapshot checkpoint as it follows the history (lane.checkpoint), deletes a deleted
// run's (retention), and repairs the bucket (reconcileCheckpoints). Workers, the ingress and the
// scheduler only read checkpoints (engine.Config.Checkpoints).

// checkpoint writes run f's checkpoint when the commits the lane just applied, from the one
// after sequence prev on, crossed a checkpoint boundary (engine.CheckpointDue), unless the run
// ended. The checkpoint is f's snapshot at f.pos, the stream position of the message that holds
// f.s.Seq: the last commit's p.pos when the lane applied it to its snapshot, or what a cold load
// found, which may have read past the commits applied (their p.pos then names an earlier event
// than f.s.Seq, and a reader would find the checkpoint does not match). With no position known
// nothing is written. A failed write is logged: the checkpoint is an optimisation, and the next
// boundary writes one.
func (l *lane) checkpoint(ctx context.Context, f *followed, prev uint64) {
	every := l.s.cfg.CheckpointEvery
	if every < 0 || f.pos == 0 || f.s.Terminal() || !engine.CheckpointDue(prev, f.s.Seq, uint64(every)) {
		return
	}
	if err := l.s.writeCheckpoint(ctx, f.s, f.pos); err != nil {
		l.s.logger.WarnContext(ctx, "checkpoint not written", slog.String("run_id", f.s.RunID), slog.Uint64("seq", f.s.Seq),
			slog.String("error", err.Error()))
	}
}

// writeCheckpoint writes run snap's checkpoint at stream position pos, which holds the commit
// that ends with event snap.Seq.
func (s *Service) writeCheckpoint(ctx context.Context, snap *core.Snapshot, pos uint64) error {
	cp, err := engine.NewCheckpoint(snap, pos)
	if err != nil {
		return err
	}
	return s.retention.checkpoints.Save(ctx, cp)
}
