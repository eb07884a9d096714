package jsstore

import "github.com/flowrun/flow/internal/store"

var _ store.Positioner = (*Store)(nil)

// ObservePosition implements store.Positioner: pos is the stream sequence of the commit that ends at
// run sequence runSeq.
func (s *Store) ObservePosition(runID string, runSeq, pos uint64) { s.remember(runID, runSeq, pos) }
