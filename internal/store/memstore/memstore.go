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
	mu        sync.RWMutex
	runs      map[string][][]byte
	followers map[string]map[int]func(store.Commit)
	nextID    int
	// commits, when set, is called with every commit after it is stored, in commit order.
	commits func(store.Commit)
}

// New returns an empty store.
func New() *Store {
	return &Store{runs: map[string][][]byte{}, followers: map[string]map[int]func(store.Commit){}}
}

var (
	_ store.EventStore = (*Store)(nil)
	_ store.Follower   = (*Store)(nil)
)

// OnCommit makes the store call fn with every commit after it is stored, synchronously and in
// commit order across runs, as a consumer of a history stream sees them. fn must not call the
// store's Append. Call it before the store is used.
func (s *Store) OnCommit(fn func(store.Commit)) { s.commits = fn }

// Follow implements store.Follower: fn is called synchronously after each append to the run.
func (s *Store) Follow(runID string, fn func(store.Commit)) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextID
	s.nextID++
	if s.followers[runID] == nil {
		s.followers[runID] = map[int]func(store.Commit){}
	}
	s.followers[runID][id] = fn
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.followers[runID], id)
		if len(s.followers[runID]) == 0 {
			delete(s.followers, runID)
		}
	}, nil
}

// LoadAtLeast implements store.EventStore; Load never lags in memory.
func (s *Store) LoadAtLeast(ctx context.Context, runID string, after, _ uint64) ([]event.Envelope, error) {
	return s.Load(ctx, runID, after)
}

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
	last := uint64(len(s.runs[runID]))
	if last != expected {
		s.mu.Unlock()
		return 0, &store.ConflictError{RunID: runID, Expected: expected, Actual: last}
	}
	s.runs[runID] = append(s.runs[runID], encoded...)
	fns := make([]func(store.Commit), 0, len(s.followers[runID]))
	for _, fn := range s.followers[runID] {
		fns = append(fns, fn)
	}
	s.mu.Unlock()
	c := store.Commit{RunID: runID, First: expected + 1, Last: expected + uint64(len(events)), Events: func() ([]event.Envelope, error) {
		return decode(runID, expected, encoded)
	}}
	if s.commits != nil {
		s.commits(c)
	}
	for _, fn := range fns {
		fn(c)
	}
	return c.Last, nil
}

func decode(runID string, after uint64, stored [][]byte) ([]event.Envelope, error) {
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
	return decode(runID, after, stored)
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
