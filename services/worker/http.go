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
