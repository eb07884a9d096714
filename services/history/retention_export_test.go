package history

import "github.com/flowrun/flow/internal/core"

// IndexedEntry returns run runID's entry in the service's copy of the runs index, for tests
// that wait until the sweeper sees a run's end.
func (s *Service) IndexedEntry(runID string) (core.Summary, bool) { return s.index.get(runID) }
