package jsstore

import (
	"context"
	"fmt"

	"github.com/flowrun/flow/internal/streams"
	"github.com/flowrun/flow/pkg/event"
)

// What a cold load from a snapshot checkpoint needs of the store (internal/engine/checkpoint.go):
// check the commit the checkpoint ends with, and read only the messages after it.

// CommitAt returns the events of the commit at stream sequence pos, which must be a message of
// run runID: one direct get, whatever the history's length. A message of another subject, or
// none, is an error wrapping event.ErrMalformed or jetstream.ErrMsgNotFound.
func (s *Store) CommitAt(ctx context.Context, runID string, pos uint64) ([]event.Envelope, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	st, err := s.history(ctx)
	if err != nil {
		return nil, err
	}
	m, err := st.GetMsg(ctx, pos)
	if err != nil {
		return nil, fmt.Errorf("reading stream message %d of run %q: %w", pos, runID, err)
	}
	s.read.Add(1)
	if m.Subject != streams.HistorySubject(runID) {
		return nil, fmt.Errorf("%w: stream message %d is on %s, not run %q's subject", event.ErrMalformed, pos, m.Subject, runID)
	}
	c, ok := CommitOf(runID, m.Header, m.Data)
	if !ok {
		return nil, fmt.Errorf("%w: stream message %d of run %q has no commit headers", event.ErrMalformed, pos, runID)
	}
	return c.Events()
}

// LoadAfter is LoadAtLeast for the events after sequence after, whose commit is at stream
// sequence pos: it reads only the messages after pos (a checkpoint's tail), whatever this store
// saw of the run before.
func (s *Store) LoadAfter(ctx context.Context, runID string, after, pos, atLeast uint64) ([]event.Envelope, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	if err := s.quarantine.check(runID); err != nil {
		return nil, err
	}
	s.remember(runID, after, pos)
	s.mu.Lock()
	if p, ok := s.pos[runID]; ok {
		atLeast = max(atLeast, p.runSeq)
	}
	s.mu.Unlock()
	return s.loadFrom(ctx, runID, after, atLeast, pos+1)
}

// MessagesRead returns the number of history messages this store's loads have read: tests and
// benchmarks count what a cold load reads with it.
func (s *Store) MessagesRead() uint64 { return s.read.Load() }
