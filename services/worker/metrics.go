package worker

import (
	"context"
	"time"

	"github.com/flowrun/flow/internal/metrics"
)

// backlogTimeout bounds the consumer info requests of one collection of flow.tasks.pending.
const backlogTimeout = 2 * time.Second

// observe registers the worker's observable gauge flow.tasks.pending: the tasks waiting in its
// FLOW_TASKS consumers, read from consumer info (one request per consumer) at each collection,
// never on the task path. Stop unregisters it.
func (w *Worker) observe() error {
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
		return err
	}
	w.unobserve = unregister
	return nil
}
