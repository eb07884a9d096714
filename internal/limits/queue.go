package limits

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/typedkv"
)

// Queue is the admission queue, the FLOW_QUEUE bucket: one Waiting entry per run under flow
// control that waits for admission, keyed by the run's ID. The history service is its one
// writer (a projection of each run's latest snapshot, repaired by its reconciler and purged by
// retention); the admission controller (services/scheduler) watches it. It is safe for
// concurrent use.
type Queue struct {
	// b reads entries leniently (Get), strict the strict reading of the watch (Watch).
	b, strict *typedkv.Bucket[Waiting]
}

// OpenQueue opens FLOW_QUEUE, which streams.Ensure creates.
func OpenQueue(ctx context.Context, js jetstream.JetStream) (*Queue, error) {
	b, err := typedkv.OpenCodec(ctx, js, streams.QueueBucket, typedkv.Codec[Waiting]{Decode: func(value []byte) (Waiting, error) {
		// A malformed entry is an entry all the same, for its writer to overwrite or delete.
		var w Waiting
		_ = json.Unmarshal(value, &w)
		return w, nil
	}})
	if err != nil {
		return nil, err
	}
	return &Queue{b: b, strict: typedkv.View(b, typedkv.Codec[Waiting]{Decode: DecodeWaiting})}, nil
}

// Put queues w, overwriting its run's entry.
func (q *Queue) Put(ctx context.Context, w Waiting) error {
	_, err := q.b.Put(ctx, w.RunID, w)
	return err
}

// Get returns run runID's entry and its revision; found is false when it has none.
func (q *Queue) Get(ctx context.Context, runID string) (w Waiting, rev uint64, found bool, err error) {
	e, found, err := q.b.Get(ctx, runID)
	if err != nil || !found {
		return Waiting{}, 0, false, err
	}
	return e.Value, e.Revision, true, nil
}

// Delete takes run runID off the queue; rev, when not 0, is the revision the entry must still
// have. An entry that is gone is no error.
func (q *Queue) Delete(ctx context.Context, runID string, rev uint64) error {
	if err := q.b.Delete(ctx, runID, rev); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	return nil
}

// Runs lists the IDs of the runs queued.
func (q *Queue) Runs(ctx context.Context) ([]string, error) { return q.b.Keys(ctx) }

// QueueEntry is a FLOW_QUEUE entry as watched: its Key is its run's ID, its Value the Waiting
// run; Deleted marks a run taken off the queue (a deletion or a purge), Err a malformed entry
// (DecodeWaiting's error).
type QueueEntry = typedkv.Entry[Waiting]

// QueueWatcher follows the admission queue (Queue.Watch).
type QueueWatcher = typedkv.Watcher[Waiting]

// Watch watches every entry: the existing ones first, then nil, then every change, until
// QueueWatcher.Stop or the end of ctx, which close its Updates.
func (q *Queue) Watch(ctx context.Context) (*QueueWatcher, error) { return q.strict.Watch(ctx) }

// DecodeWaiting decodes a FLOW_QUEUE entry's value; an entry without a run or with an invalid
// control is malformed.
func DecodeWaiting(value []byte) (Waiting, error) {
	var w Waiting
	if err := json.Unmarshal(value, &w); err != nil {
		return Waiting{}, err
	}
	if w.RunID == "" || w.Control == nil {
		return Waiting{}, errors.New("limits: a queue entry names no run or no control")
	}
	if err := w.Control.Validate(); err != nil {
		return Waiting{}, err
	}
	return w, nil
}
