// Package timerindex is the FLOW_TIMERS bucket: the index of every run's pending timers (waits,
// retry backoffs, delayed starts, schedule-to-start timeouts), one entry per timer, keyed
// "<run>.<timer key>" and holding the core.Timer as JSON. The history service is its one writer
// (docs/derived-state.md): it registers each commit's new timers and deletes the moot ones
// (through jshost.Host), and its reconciler and retention repair and purge them; the scheduler
// that leads watches it and fires the timers as they fall due.
package timerindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/typedkv"
)

// Index reads and writes FLOW_TIMERS. It is safe for concurrent use.
type Index struct {
	b *typedkv.Bucket[core.Timer]
}

// Open opens FLOW_TIMERS, which streams.Ensure creates.
func Open(ctx context.Context, js jetstream.JetStream) (*Index, error) {
	b, err := typedkv.OpenCodec(ctx, js, streams.TimersBucket, typedkv.Codec[core.Timer]{Decode: Decode})
	if err != nil {
		return nil, err
	}
	return &Index{b: b}, nil
}

// Key is the FLOW_TIMERS key of timer t.
func Key(t core.Timer) string { return t.RunID + "." + t.Key() }

// Put registers timer t, overwriting its entry (with the same value, on a repair).
func (x *Index) Put(ctx context.Context, t core.Timer) error {
	if _, err := x.b.Put(ctx, Key(t), t); err != nil {
		return fmt.Errorf("registering timer %s: %w", Key(t), err)
	}
	return nil
}

// DeleteTimer deletes timer t's entry at the revision it has, if it exists: nothing is written
// for an entry that is gone, and an entry written again meanwhile stays.
func (x *Index) DeleteTimer(ctx context.Context, t core.Timer) error {
	key := Key(t)
	e, found, err := x.b.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading timer %s: %w", key, err)
	}
	if !found {
		return nil
	}
	err = x.b.Delete(ctx, key, e.Revision)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		// A revision mismatch means the entry changed meanwhile: it is not the one to delete.
		return fmt.Errorf("deleting timer %s: %w", key, err)
	}
	return nil
}

// Delete deletes the entry of key (as ByRun lists them); one that is gone is no error.
func (x *Index) Delete(ctx context.Context, key string) error {
	if err := x.b.Delete(ctx, key, 0); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("deleting timer %s: %w", key, err)
	}
	return nil
}

// DeleteRun deletes every entry of run runID.
func (x *Index) DeleteRun(ctx context.Context, runID string) error {
	keys, err := x.b.Keys(ctx, runID+".>")
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := x.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// ByRun lists the keys of every entry, by run.
func (x *Index) ByRun(ctx context.Context) (map[string][]string, error) {
	keys, err := x.b.Keys(ctx)
	if err != nil {
		return nil, err
	}
	byRun := map[string][]string{}
	for _, k := range keys {
		if run, _, ok := strings.Cut(k, "."); ok {
			byRun[run] = append(byRun[run], k)
		}
	}
	return byRun, nil
}

// Entry is a FLOW_TIMERS entry as watched: its Key is its timer's Key, its Value the timer;
// Deleted marks a deletion or a purge (Value zero), Err an entry that does not decode (Decode's
// error).
type Entry = typedkv.Entry[core.Timer]

// Watcher follows FLOW_TIMERS (Index.Watch).
type Watcher = typedkv.Watcher[core.Timer]

// Watch watches every entry: the existing ones first, then nil, then every change, until
// Watcher.Stop or the end of ctx, which close its Updates.
func (x *Index) Watch(ctx context.Context) (*Watcher, error) { return x.b.Watch(ctx) }

// Decode decodes the value of an entry; a timer without a run is malformed.
func Decode(value []byte) (core.Timer, error) {
	var t core.Timer
	if err := json.Unmarshal(value, &t); err != nil {
		return core.Timer{}, err
	}
	if t.RunID == "" {
		return core.Timer{}, errors.New("a timer entry names no run")
	}
	return t, nil
}
