package history

import "github.com/flowrun/flow/internal/metrics"

// observe registers the service's observable gauges (flow.runs.blocked, from the runs index);
// shutdown unregisters them.
func (s *Service) observe() error {
	unregister, err := metrics.ObserveBlockedRuns(s.index.blockedRuns)
	if err != nil {
		return err
	}
	s.unobserve = unregister
	return nil
}
