package scheduler

import (
	"context"

	"github.com/flowrun/flow/internal/health"
)

// HTTPAddr returns the address GET /healthz, /readyz and /metrics are served on, or "" when
// they are off or the scheduler has not started.
func (s *Scheduler) HTTPAddr() string { return s.probes.Addr() }

// Ready is nil while the scheduler serves: Start has finished, Stop has not begun, and its
// NATS connection is up. A standby (not holding the lease) is ready: it takes over when the
// leader goes. GET /readyz answers it.
func (s *Scheduler) Ready(context.Context) error {
	if err := s.readiness.Err(); err != nil {
		return err
	}
	return health.NATS(s.nc)
}
