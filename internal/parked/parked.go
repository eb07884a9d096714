// Package parked holds the runs that no worker of their queue can drive now, the FLOW_PARKED
// bucket: one entry per run, keyed by its run ID. The history service is its one writer: it
// writes an entry when a worker asks it to park a run (internal/api/derived.go), dispatches the
// run again when a worker that can drive it registers or its pause ends, and deletes the entry
// then, or once the run ended (docs/derived-state.md).
package parked

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/typedkv"
)

// Run is a FLOW_PARKED entry: a run no worker of its queue could drive, and why. The history
// service dispatches it again when a worker registers Definition on Queue with a build that can
// drive it (Build, or any build when Build is empty), or on `flow resume`.
type Run struct {
	RunID      string `json:"run_id"`
	Queue      string `json:"queue"`
	Definition string `json:"definition"`
	// Build is the build the run is pinned to; empty when any build may drive it.
	Build string `json:"build_id,omitempty"`
	// Reason says why, for `flow runs` and `flow status`.
	Reason string `json:"reason"`
	// Seq is the run's sequence when it was parked.
	Seq      uint64    `json:"seq"`
	ParkedAt time.Time `json:"parked_at"`
	// By names the worker that parked it.
	By string `json:"by,omitempty"`
	// Pause is the FLOW_PAUSES key of the definition or queue pause that holds the run
	// (pauses.Key); empty for other reasons. The history service dispatches the run again once
	// that pause is gone.
	Pause string `json:"pause,omitempty"`
}

// Entry is a FLOW_PARKED entry as read or watched; its Key is the run ID.
type Entry = typedkv.Entry[Run]

// Watcher follows FLOW_PARKED (Store.Watch).
type Watcher = typedkv.Watcher[Run]

// Store is the FLOW_PARKED repository. It is safe for concurrent use.
type Store struct {
	b *typedkv.Bucket[Run]
}

// Open opens FLOW_PARKED on js.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	b, err := typedkv.Open[Run](ctx, js, streams.ParkedBucket)
	if err != nil {
		return nil, err
	}
	return &Store{b: b}, nil
}

// Put records r, replacing the run's entry if it has one.
func (s *Store) Put(ctx context.Context, r Run) error {
	_, err := s.b.Put(ctx, r.RunID, r)
	return err
}

// Delete deletes run runID's entry; with rev > 0 only the entry at that revision, else it
// returns an error wrapping jetstream.ErrKeyRevisionMismatch (or ErrKeyExists, by server
// version): the entry changed since it was read.
func (s *Store) Delete(ctx context.Context, runID string, rev uint64) error {
	return s.b.Delete(ctx, runID, rev)
}

// List returns the parked runs, read by one watch.
func (s *Store) List(ctx context.Context) ([]Entry, error) { return s.b.List(ctx) }

// Watch follows the parked runs: every entry there is, nil, then each change, until
// Watcher.Stop or the end of ctx.
func (s *Store) Watch(ctx context.Context) (*Watcher, error) { return s.b.Watch(ctx) }
