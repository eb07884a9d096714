package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/flowrun/flow/internal/metrics"
)

// backlogTimeout bounds the consumer info requests of one collection of flow.tasks.pending.
const backlogTimeout = 2 * time.Second

// observe registers the worker's observable gauge flow.tasks.pending: the tasks waiting in its
// FLOW_TASKS consumers, read from consumer info (one request per consumer) at each collection,
// never on the task path. Stop unregisters it. A gauge that cannot be registered is logged: the
// worker runs without it.
func (w *Worker) observe() {
	unregister, err := metrics.ObserveTaskBacklog(func(ctx context.Context) []metrics.Backlog {
		ctx, cancel := context.WithTimeout(ctx, backlogTimeout)
		defer cancel()
		out := make([]metrics.Backlog, 0, len(w.cons))
		for _, cons := range w.cons {
			info, err := cons.Info(ctx)
			if err != nil {
				continue // not observed this time: a gap, not a wrong value
			}
			out = append(out, metrics.Backlog{Queue: w.cfg.Queue, Consumer: info.Name, Pending: int64(info.NumPending)})
		}
		return out
	})
	if err != nil {
		w.logger.Warn("the task backlog gauge is not observed", slog.String("metric", metrics.TaskBacklogName), slog.String("error", err.Error()))
		return
	}
	w.unobserve = unregister
}
