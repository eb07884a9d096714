// Package heartbeats is the FLOW_HEARTBEATS bucket (docs/timeouts.md): one entry per step of a
// run, keyed "<run>.<step>", holding the engine.HeartbeatEntry of the step's latest attempt as
// JSON. Workers are its one writer, each write a compare-and-set on the entry's revision
// (services/worker); the scheduler's heartbeat timeouts watch it, and its timers read it to find
// a schedule-to-start timer moot. Entries leave the bucket with its TTL.
package heartbeats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/typedkv"
)

// Store reads and writes FLOW_HEARTBEATS. It is safe for concurrent use.
type Store struct {
	b *typedkv.Bucket[engine.HeartbeatEntry]
}

// Open opens FLOW_HEARTBEATS, which streams.Ensure creates.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	b, err := typedkv.OpenCodec(ctx, js, streams.HeartbeatsBucket, typedkv.Codec[engine.HeartbeatEntry]{Decode: Decode})
	if err != nil {
		return nil, err
	}
	return &Store{b: b}, nil
}

// Key is step stepID of run runID's key. Run and step IDs hold no '.', so the key has two
// tokens.
func Key(runID, stepID string) string { return runID + "." + stepID }

// ErrMalformed is wrapped by Get when the entry does not decode.
var ErrMalformed = errors.New("heartbeats: malformed entry")

// Get returns the entry of step stepID of run runID and its revision; rev 0 means it has none.
// An entry that does not decode returns its revision and an error wrapping ErrMalformed.
func (s *Store) Get(ctx context.Context, runID, stepID string) (e engine.HeartbeatEntry, rev uint64, err error) {
	te, found, err := s.b.Get(ctx, Key(runID, stepID))
	if err != nil || !found {
		return engine.HeartbeatEntry{}, 0, err
	}
	if te.Err != nil {
		return engine.HeartbeatEntry{}, te.Revision, fmt.Errorf("%w: %w", ErrMalformed, te.Err)
	}
	return te.Value, te.Revision, nil
}

// Put writes entry e of step e.StepID of run e.RunID if its entry is still at revision rev (0:
// if it has none), and returns the new revision; it fails when another writer was first.
func (s *Store) Put(ctx context.Context, e *engine.HeartbeatEntry, rev uint64) (uint64, error) {
	return s.b.CreateOrUpdate(ctx, Key(e.RunID, e.StepID), *e, rev)
}

// Entry is a FLOW_HEARTBEATS entry as watched: its Key is its step's Key, its Value the
// step's latest attempt, its Created time when it was last written, by the server's clock;
// Deleted marks a deletion or a purge (or the bucket's TTL), Err an entry that does not decode.
type Entry = typedkv.Entry[engine.HeartbeatEntry]

// Watcher follows FLOW_HEARTBEATS (Store.Watch).
type Watcher = typedkv.Watcher[engine.HeartbeatEntry]

// Watch watches every entry: the existing ones first, then nil, then every change, until
// Watcher.Stop or the end of ctx, which close its Updates.
func (s *Store) Watch(ctx context.Context) (*Watcher, error) { return s.b.Watch(ctx) }

// Decode decodes the value of an entry.
func Decode(value []byte) (engine.HeartbeatEntry, error) {
	var e engine.HeartbeatEntry
	err := json.Unmarshal(value, &e)
	return e, err
}
