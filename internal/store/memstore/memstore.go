// Package memstore is an in-memory event store for tests and the flowtest harness. It encodes
// every event to JSON on Append and decodes it on Load, as a durable store would, so that
// callers never share payloads with the store or with each other.
package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// Store is an in-memory store.EventStore. The zero value is not usable; call New. It is safe
// for concurrent use.
type Store struct {
	mu   sync.RWMutex
	runs map[string][][]byte
}

// New returns an empty store.
func New() *Store { return &Store{runs: map[string][][]byte{}} }

var _ store.EventStore = (*Store)(nil)

// Append implements store.EventStore.
func (s *Store) Append(ctx context.Context, runID string, expected uint64, events ...event.Event) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := store.CheckAppend(runID, events); err != nil {
		return 0, err
	}
	encoded := make([][]byte, len(events))
	for i, e := range events {
		b, err := json.Marshal(event.Envelope{RunID: runID, Seq: expected + uint64(i) + 1, Time: e.Time, Payload: e.Payload})
		if err != nil {
			return 0, fmt.Errorf("encoding %s: %w", e.Payload.EventType(), err)
		}
		encoded[i] = b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	last := uint64(len(s.runs[runID]))
	if last != expected {
		return 0, &store.ConflictError{RunID: runID, Expected: expected, Actual: last}
	}
	s.runs[runID] = append(s.runs[runID], encoded...)
	return last + uint64(len(events)), nil
}

// Load implements store.EventStore.
func (s *Store) Load(ctx context.Context, runID string, after uint64) ([]event.Envelope, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	stored := s.runs[runID]
	if after < uint64(len(stored)) {
		stored = stored[after:]
	} else {
		stored = nil
	}
	s.mu.RUnlock()
	out := make([]event.Envelope, len(stored))
	for i, b := range stored {
		e, err := event.Decode(b)
		if err != nil {
			return nil, fmt.Errorf("decoding seq %d of run %q: %w", after+uint64(i)+1, runID, err)
		}
		out[i] = e
	}
	return out, nil
}

// Runs returns the IDs of every run with events, in no particular order.
func (s *Store) Runs() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := make([]string, 0, len(s.runs))
	for id := range s.runs {
		ids = append(ids, id)
	}
	return ids
}
