package worker

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/streams"
)

// parkHeld parks a run that a definition or queue pause holds (FLOW_PAUSES): the drive made no
// decision and started no attempt. The FLOW_PARKED entry names the pause; the history service,
// which follows both buckets, dispatches the run again once the pause is gone, whichever of the
// two changes it sees first: a pause deleted before the entry was written finds the entry when
// it arrives. The task is acknowledged only once the entry is written, so that a worker that
// dies in between leaves the task to be redelivered (docs/pause.md).
func (w *Worker) parkHeld(ctx context.Context, msg jetstream.Msg, held *engine.HeldError, seq uint64) {
	w.park(ctx, msg, streams.Parked{RunID: held.RunID, Queue: queueOf(held.Queue), Definition: held.Definition, Build: held.Build,
		Reason: held.Pause.Describe(), Seq: max(seq, held.Seq), Pause: held.Pause.Key()})
}

func queueOf(q string) string {
	if q == "" {
		return streams.DefaultQueue
	}
	return q
}
