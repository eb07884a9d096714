package ingress

import (
	"context"
	"errors"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/health"
)

// Ready is nil while the service takes inputs: Start has finished, Stop has not begun, its NATS
// connection is up and its subscription to flow.ingress.> is valid. GET /readyz answers it;
// GET /healthz stays 200 while the process serves HTTP.
func (s *Service) Ready(context.Context) error {
	if err := s.readiness.Err(); err != nil {
		return err
	}
	if err := health.NATS(s.nc); err != nil {
		return err
	}
	if s.sub == nil || !s.sub.IsValid() {
		return errors.New("not subscribed to " + api.IngressPrefix + ">")
	}
	return nil
}
