package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/parked"
)

// parkHeld parks a run that a definition or queue pause holds (FLOW_PAUSES): the drive made no
// decision and started no attempt. The history service writes the FLOW_PARKED entry, which
// names the pause, at the worker's request; it follows both buckets, and dispatches the run
// again once the pause is gone, whichever of the two changes it sees first: a pause deleted
// before the entry was written finds the entry when it arrives. The task is acknowledged only
// once the history service answered that the entry is written (or that the run ended), so
// that a worker that dies in between, or no answer, leaves the task to be redelivered
// (docs/pause.md).
func (w *Worker) parkHeld(ctx context.Context, msg jetstream.Msg, held *engine.HeldError, seq uint64) {
	p := parked.Run{RunID: held.RunID, Queue: queueOf(held.Queue), Definition: held.Definition, Build: held.Build,
		Reason: held.Pause.Describe(), Seq: max(seq, held.Seq), Pause: held.Pause.Key(), ParkedAt: time.Now().UTC(), By: w.id}
	_, err := askPark(ctx, w.nc, p)
	if err != nil {
		w.logger.WarnContext(ctx, "parking a held run failed; the task will be retried", slog.String("run_id", p.RunID), slog.String("error", err.Error()))
		_ = msg.NakWithDelay(backoff(msg))
		return
	}
	if err := w.cfg.Faults.Hit(fault.PauseParkBeforeAck); err != nil {
		// As if the worker died here: the task comes back after its AckWait.
		w.logger.WarnContext(ctx, "injected fault: a held run is parked, its task not acknowledged", slog.String("run_id", p.RunID))
		return
	}
	w.logger.InfoContext(ctx, "run held by a pause; parked", slog.String("run_id", p.RunID), slog.String("pause", p.Pause))
	_ = msg.Ack()
}

func queueOf(q string) string {
	if q == "" {
		return streams.DefaultQueue
	}
	return q
}
