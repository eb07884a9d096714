package history

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/health"
)

// Ready is nil while the service applies commits and answers queries: Start has finished, Stop
// has not begun, its NATS connection is up and its consumer of the history stream exists. GET
// /readyz answers it; GET /healthz stays 200 while the process serves HTTP.
func (s *Service) Ready(ctx context.Context) error {
	if err := s.readiness.Err(); err != nil {
		return err
	}
	if err := health.NATS(s.nc); err != nil {
		return err
	}
	if !s.consuming.Load() {
		return errors.New("not consuming the history stream")
	}
	for _, name := range s.layout.Streams() {
		if _, err := s.js.Consumer(ctx, name, streams.HistoryConsumer); err != nil {
			return fmt.Errorf("the %s consumer of stream %s: %w", streams.HistoryConsumer, name, err)
		}
	}
	return nil
}
