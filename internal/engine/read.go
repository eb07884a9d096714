package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/core"
)

// readHandoff bounds how long ReadSnapshot waits for the holder of a run's lock to hand over a
// copy, and readPatience how long it keeps trying before it reads the run from the store.
const (
	readHandoff  = time.Millisecond
	readPatience = 20 * time.Millisecond
)

// ReadSnapshot returns a copy of run runID's snapshot, owned by the caller, for reading: queries
// answer from it. When this engine holds the run warm, the copy is made from its cached snapshot
// (by ReadSnapshot while nobody holds the run, or by the run's driver, between two changes, while
// its steps run) and brought up to date with the events committed after it; otherwise the run's
// history is read and projected. ReadSnapshot never changes a cached snapshot, holds the run's
// lock only while it copies, and never waits for a driver longer than readPatience: a driver busy
// deciding or committing is skipped and the history read instead. An unknown run is an error
// wrapping core.ErrNotFound. A run that ended is read from its final history.
func (e *Engine) ReadSnapshot(ctx context.Context, runID string) (*core.Snapshot, error) {
	s, err := e.warmCopy(ctx, runID)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return e.snapshot(ctx, runID, 0)
	}
	if !s.Terminal() {
		tail, err := e.store.Load(ctx, runID, s.Seq)
		if err == nil {
			err = s.ApplyAll(tail)
		}
		if err != nil {
			return nil, fmt.Errorf("reading run %q after seq %d: %w", runID, s.Seq, err)
		}
	}
	return s, nil
}

// warmCopy returns a copy of the run's cached snapshot, or nil when the engine holds none (or
// its holder did not hand one over in time).
func (e *Engine) warmCopy(ctx context.Context, runID string) (*core.Snapshot, error) {
	give := time.Now().Add(readPatience)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	reply := make(chan *core.Snapshot, 1)
	for {
		rl, locked := e.locks.tryLock(runID)
		if locked {
			s, _ := e.cache.get(runID)
			var c *core.Snapshot
			if s != nil {
				c = s.Clone()
			}
			e.locks.unlock(runID, rl)
			return c, nil
		}
		if time.Now().After(give) {
			return nil, nil
		}
		if timer == nil {
			timer = time.NewTimer(readHandoff)
		} else {
			timer.Reset(readHandoff)
		}
		select {
		case rl.reads <- reply:
			select {
			case c := <-reply:
				return c, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
