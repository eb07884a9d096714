package history

import (
	"context"
	"sync"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/lru"
	"github.com/flowrun/flow/internal/store/jsstore"
)

// snapshotCache holds projections of runs for the update endpoint, so that waits on the same
// run (one update after another) read only the events committed since the previous one instead
// of the whole history. It only saves reads: a projection is a fold of the run's committed
// events, extended by reading the tail, never trusted beyond what the store returns.
type snapshotCache struct {
	mu      sync.Mutex
	entries *lru.Cache[string, *cachedSnapshot]
}

type cachedSnapshot struct {
	mu sync.Mutex
	s  *core.Snapshot
}

func newSnapshotCache(limit int) *snapshotCache {
	return &snapshotCache{entries: lru.New[string, *cachedSnapshot](limit)}
}

// read calls fn with run runID's projection brought up to date with the store (its committed
// events up to at least atLeast), under the entry's lock: fn must not keep s. A run without
// events calls fn with nil.
func (c *snapshotCache) read(ctx context.Context, st *jsstore.Store, runID string, atLeast uint64, fn func(s *core.Snapshot) error) error {
	e := c.entry(runID)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.s == nil {
		hist, err := st.LoadAtLeast(ctx, runID, 0, atLeast)
		if err != nil {
			return err
		}
		if len(hist) == 0 {
			c.forget(runID)
			return fn(nil)
		}
		s, err := core.Project(runID, hist)
		if err != nil {
			c.forget(runID)
			return err
		}
		e.s = s
	} else if !e.s.Terminal() {
		tail, err := st.LoadAtLeast(ctx, runID, e.s.Seq, atLeast)
		if err == nil {
			err = e.s.ApplyAll(tail)
		}
		if err != nil {
			e.s = nil
			c.forget(runID)
			return err
		}
	}
	return fn(e.s)
}

// entry returns run runID's entry, creating it (and evicting the least recently used one past
// the limit).
func (c *snapshotCache) entry(runID string) *cachedSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries.Get(runID)
	if !ok {
		e = &cachedSnapshot{}
		c.entries.Put(runID, e)
	}
	return e
}

func (c *snapshotCache) forget(runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries.Remove(runID)
}
