package jsstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/store"
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
	st, err := s.HistoryOf(ctx, runID)
	if err != nil {
		return nil, err
	}
	m, err := st.GetMsg(ctx, pos)
	if err != nil {
		return nil, fmt.Errorf("reading stream message %d of run %q: %w", pos, runID, err)
	}
	s.read.Add(1)
	if m.Subject != s.layout.Subject(runID) {
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
	if err := s.quarantine.check(ctx, runID); err != nil {
		return nil, err
	}
	s.remember(runID, after, pos)
	s.mu.Lock()
	if p, ok := s.pos[runID]; ok {
		atLeast = max(atLeast, p.runSeq)
	}
	s.mu.Unlock()
	return s.loadFrom(ctx, runID, after, atLeast, pos+1, after)
}

// MessagesRead returns the number of history messages this store's loads have read: tests and
// benchmarks count what a cold load reads with it.
func (s *Store) MessagesRead() uint64 { return s.read.Load() }

// BulkAppend appends events to run runID after sequence expected, perCommit events to a
// commit (at least one), publishing the commits asynchronously, bulkWindow at a time, without
// the per-run sequence check of Append: only for a run no one else writes, to build a long
// history quickly (benchmarks of million-event runs). It returns the last sequence once every
// commit is stored.
func (s *Store) BulkAppend(ctx context.Context, runID string, expected uint64, events []event.Event, perCommit int) (uint64, error) {
	if err := store.CheckAppend(runID, events); err != nil {
		return 0, err
	}
	perCommit = max(perCommit, 1)
	acks := make([]jetstream.PubAckFuture, 0, bulkWindow)
	seq, last := expected, uint64(0)
	settle := func() error {
		for _, a := range acks {
			select {
			case ack := <-a.Ok():
				last = max(last, ack.Sequence)
			case err := <-a.Err():
				return fmt.Errorf("appending to run %q: %w", runID, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		acks = acks[:0]
		return nil
	}
	for len(events) > 0 {
		n := min(perCommit, len(events))
		envs := make([]event.Envelope, n)
		for i, e := range events[:n] {
			envs[i] = event.Envelope{RunID: runID, Seq: seq + 1 + uint64(i), Time: e.Time.UTC(), Payload: e.Payload}
		}
		body, err := event.MarshalEnvelopes(envs)
		if err != nil {
			return 0, fmt.Errorf("encoding commit of run %q: %w", runID, err)
		}
		ack, err := s.js.PublishMsgAsync(s.message(ctx, runID, envs, body, nuid.Next()),
			jetstream.WithMsgID(runID+":"+strconv.FormatUint(seq+1, 10)))
		if err != nil {
			return 0, fmt.Errorf("appending to run %q: %w", runID, err)
		}
		acks = append(acks, ack)
		seq += uint64(n)
		events = events[n:]
		if len(acks) == bulkWindow {
			if err := settle(); err != nil {
				return 0, err
			}
		}
	}
	if err := settle(); err != nil {
		return 0, err
	}
	s.remember(runID, seq, last)
	return seq, nil
}

// bulkWindow is the number of commits BulkAppend has in flight at most.
const bulkWindow = 1000
