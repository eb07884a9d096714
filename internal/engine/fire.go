package engine

import (
	"context"

	"github.com/flowrun/flow/internal/core"
)

// Preload reads the snapshot of timer t's run into the engine's cache, up to at least the event
// that scheduled t, so that Fire soon after appends without reading first: a scheduler calls
// it for timers about to fall due. It reads nothing when the cached snapshot already reaches
// that event, and does nothing while another caller holds the run (that caller reads it). An
// error means only that the snapshot is not cached: Fire reads the run itself.
func (e *Engine) Preload(ctx context.Context, t core.Timer) error {
	atLeast := max(t.Seq, 1)
	rl, locked := e.locks.tryLock(t.RunID)
	if !locked {
		return nil
	}
	defer e.locks.unlock(t.RunID, rl)
	if s, _ := e.cache.get(t.RunID); s != nil {
		if s.Seq >= atLeast || s.Terminal() {
			return nil
		}
		tail, err := e.store.LoadAtLeast(ctx, t.RunID, s.Seq, atLeast)
		if err == nil {
			err = s.ApplyAll(tail)
		}
		if err != nil {
			e.cache.drop(t.RunID)
		}
		return err
	}
	s, err := e.snapshot(ctx, t.RunID, atLeast)
	if err != nil {
		return err
	}
	e.cache.put(t.RunID, s, false)
	return nil
}
