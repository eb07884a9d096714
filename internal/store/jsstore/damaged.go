package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/typedkv"
)

// Damaged is a FLOW_DAMAGED entry: a run whose stored history does not read back whole, and
// why. Its key is the run ID.
type Damaged struct {
	RunID string `json:"run_id"`
	// Reason says what was found, in which stream.
	Reason     string    `json:"reason"`
	DetectedAt time.Time `json:"detected_at"`
}

// DamagedRuns is the FLOW_DAMAGED repository. The history service is its one writer: it marks
// the runs its checks find damaged and releases them on an operator's accept-damage; every Store
// follows the bucket and refuses the runs it lists. It is safe for concurrent use.
type DamagedRuns struct {
	b *typedkv.Bucket[Damaged]
}

// OpenDamaged opens FLOW_DAMAGED on js.
func OpenDamaged(ctx context.Context, js jetstream.JetStream) (*DamagedRuns, error) {
	b, err := typedkv.Open[Damaged](ctx, js, streams.DamagedBucket)
	if err != nil {
		return nil, err
	}
	return &DamagedRuns{b: b}, nil
}

// Mark records d, quarantining run d.RunID in every store.
func (r *DamagedRuns) Mark(ctx context.Context, d Damaged) error {
	_, err := r.b.Put(ctx, d.RunID, d)
	return err
}

// Release deletes run runID's entry, lifting its quarantine; a run not marked is left alone.
func (r *DamagedRuns) Release(ctx context.Context, runID string) error {
	return r.b.Delete(ctx, runID, 0)
}

// quarantine is the set of runs the history service found damaged (FLOW_DAMAGED), kept by a
// watch for as long as the store's connection is open. The store refuses to append to them or
// read them: driving or serving a run whose history lost its tail would run its lost steps
// again.
type quarantine struct {
	kv   jetstream.KeyValue // nil: the bucket does not exist
	mu   sync.RWMutex
	runs map[string]string // run ID -> reason
}

// watchQuarantine opens FLOW_DAMAGED and returns once the set holds every entry. A bucket that
// does not exist (Flow's streams from an older version) quarantines nothing.
func watchQuarantine(ctx context.Context, js jetstream.JetStream) (*quarantine, error) {
	q := &quarantine{runs: map[string]string{}}
	kv, err := js.KeyValue(ctx, streams.DamagedBucket)
	if err != nil {
		return q, nil
	}
	q.kv = kv
	// The watch lives as long as the connection: it ends when the connection closes.
	w, err := kv.WatchAll(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", streams.DamagedBucket, err)
	}
	ready := make(chan struct{})
	go func() {
		loaded := false
		for e := range w.Updates() {
			if e == nil {
				if !loaded {
					loaded = true
					close(ready)
				}
				continue
			}
			q.apply(e)
		}
		if !loaded {
			close(ready)
		}
	}()
	select {
	case <-ready:
		return q, nil
	case <-ctx.Done():
		_ = w.Stop()
		return nil, ctx.Err()
	}
}

func (q *quarantine) apply(e jetstream.KeyValueEntry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(q.runs, e.Key())
		return
	}
	var d Damaged
	if err := json.Unmarshal(e.Value(), &d); err != nil || d.Reason == "" {
		d.Reason = "found damaged"
	}
	q.runs[e.Key()] = d.Reason
}

// check returns a *store.DamagedError if run runID is quarantined. The watch may lag behind a
// release (an operator's flow resume --accept-damage, answered before this store's watch hears
// of it): a run the set holds is refused only once the bucket confirms it; a failure to read the
// bucket refuses it.
func (q *quarantine) check(ctx context.Context, runID string) error {
	q.mu.RLock()
	reason, ok := q.runs[runID]
	q.mu.RUnlock()
	if !ok {
		return nil
	}
	if q.kv != nil {
		if _, err := q.kv.Get(ctx, runID); errors.Is(err, jetstream.ErrKeyNotFound) {
			q.mu.Lock()
			if q.runs[runID] == reason {
				delete(q.runs, runID)
			}
			q.mu.Unlock()
			return nil
		}
	}
	return &store.DamagedError{RunID: runID, Reason: reason}
}

// Damage returns why the store refuses run runID, and whether it does.
func (s *Store) Damage(runID string) (reason string, ok bool) {
	s.quarantine.mu.RLock()
	defer s.quarantine.mu.RUnlock()
	reason, ok = s.quarantine.runs[runID]
	return reason, ok
}

// Damaged returns the runs the store refuses, with why: a copy.
func (s *Store) Damaged() map[string]string {
	s.quarantine.mu.RLock()
	defer s.quarantine.mu.RUnlock()
	return maps.Clone(s.quarantine.runs)
}

// Release stops refusing run runID in this store at once, ahead of the watch, after its
// FLOW_DAMAGED entry was deleted.
func (s *Store) Release(runID string) {
	s.quarantine.mu.Lock()
	defer s.quarantine.mu.Unlock()
	delete(s.quarantine.runs, runID)
}

// Quarantine starts refusing run runID in this store at once, ahead of the watch, after its
// FLOW_DAMAGED entry was written.
func (s *Store) Quarantine(runID, reason string) {
	s.quarantine.mu.Lock()
	defer s.quarantine.mu.Unlock()
	s.quarantine.runs[runID] = reason
}
