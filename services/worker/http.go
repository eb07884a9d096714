package worker

import (
	"context"
	"fmt"

	"github.com/flowrun/flow/internal/health"
)

// HTTPAddr returns the address GET /healthz, /readyz and /metrics are served on, or "" when
// they are off or the worker has not started.
func (w *Worker) HTTPAddr() string { return w.probes.Addr() }

// Ready is nil while the worker takes tasks: Start has finished, Stop has not begun, its NATS
// connection is up and its task consumers exist. GET /readyz answers it.
func (w *Worker) Ready(ctx context.Context) error {
	if err := w.readiness.Err(); err != nil {
		return err
	}
	if err := health.NATS(w.nc); err != nil {
		return err
	}
	for _, cons := range w.cons {
		if _, err := cons.Info(ctx); err != nil {
			return fmt.Errorf("task consumer %s: %w", cons.CachedInfo().Name, err)
		}
	}
	return nil
}

// Holds reports whether this worker holds the work of definition's runs on its queue because a
// definition or queue pause is in force, as its watch of FLOW_PAUSES last saw it. A pause reaches
// each worker through that watch, so for a moment after a pause call returns a worker may still
// start a decision; Holds tells when it no longer will.
func (w *Worker) Holds(definition string) bool {
	if w.pauses == nil {
		return false
	}
	_, held := w.pauses.Held(definition, w.cfg.Queue)
	return held
}
