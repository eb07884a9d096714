// Package runsindex is the runs index, the FLOW_RUNS bucket: one entry per run, keyed by its
// run ID, holding core.Snapshot.Summary of its latest history, or, for a run deleted after its
// retention, the tombstone of its run.deleted (core.Summary.Deleted). The history service is its
// one writer, always by compare-and-set on the entry's revision; the ingress, the scheduler and
// batch jobs read it (docs/derived-state.md).
package runsindex

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/typedkv"
)

// Entry is a runs index entry as read or watched; its Key is the run ID. An entry whose Value
// is not a summary has Err set.
type Entry = typedkv.Entry[core.Summary]

// Watcher follows the runs index (Store.Watch).
type Watcher = typedkv.Watcher[core.Summary]

// Store is the FLOW_RUNS repository. It is safe for concurrent use.
type Store struct {
	b *typedkv.Bucket[core.Summary]
}

// Open opens FLOW_RUNS on js.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	b, err := typedkv.Open[core.Summary](ctx, js, streams.RunsBucket)
	if err != nil {
		return nil, err
	}
	return &Store{b: b}, nil
}

// Get returns run runID's entry; found is false when the index has none, as for an ID that
// cannot be a key. An entry whose value is not a summary is returned found, with Err set.
func (s *Store) Get(ctx context.Context, runID string) (e Entry, found bool, err error) {
	e, found, err = s.b.Get(ctx, runID)
	if errors.Is(err, jetstream.ErrInvalidKey) {
		return Entry{Key: runID}, false, nil
	}
	return e, found, err
}

// Create writes sum as its run's entry if the run has none, and returns the entry's revision;
// otherwise an error wrapping jetstream.ErrKeyExists.
func (s *Store) Create(ctx context.Context, sum core.Summary) (uint64, error) {
	return s.b.Create(ctx, sum.RunID, sum)
}

// Update writes sum as its run's entry if the entry is at revision rev, and returns its new
// revision; otherwise an error wrapping jetstream.ErrKeyRevisionMismatch (or ErrKeyExists).
func (s *Store) Update(ctx context.Context, sum core.Summary, rev uint64) (uint64, error) {
	return s.b.Update(ctx, sum.RunID, sum, rev)
}

// Watch follows the index: every entry there is, nil, then each change, until Watcher.Stop or
// the end of ctx. opts are nats.go's (jetstream.IgnoreDeletes to read current entries only).
func (s *Store) Watch(ctx context.Context, opts ...jetstream.WatchOpt) (*Watcher, error) {
	return s.b.Watch(ctx, opts...)
}

// WatchChanges follows the index's changes from now on, without the entries there are and
// without the nil that ends them in Watch: each entry as it is written, and each deletion or
// purge (Deleted), its Key the run ID, until Watcher.Stop or the end of ctx.
func (s *Store) WatchChanges(ctx context.Context) (*Watcher, error) {
	return s.b.Watch(ctx, jetstream.UpdatesOnly())
}
