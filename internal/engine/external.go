package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// Signal records signal name with payload for run runID and asks for the run to be driven. A
// delivery ID already recorded is accepted again without effect. It returns an error wrapping
// core.ErrNotFound, core.ErrTerminal or core.ErrInvalidInput when the signal cannot be accepted;
// nothing is appended then.
func (e *Engine) Signal(ctx context.Context, runID, name string, payload []byte, deliveryID string) error {
	err := e.external(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.ReceiveSignal(s, name, payload, deliveryID)
	})
	if errors.Is(err, core.ErrDuplicate) {
		return nil
	}
	return err
}

// DeliverHook records payload as the delivery to the hook token routes to. Redelivering the
// same delivery ID is accepted without effect; a different delivery to a hook that already
// received one returns an error wrapping core.ErrAlreadyReceived; an unknown token
// core.ErrNotFound.
func (e *Engine) DeliverHook(ctx context.Context, token string, payload []byte, deliveryID string) error {
	runID, hookID, err := e.host.LookupHook(ctx, token)
	if err != nil {
		return fmt.Errorf("looking up hook token: %w", err)
	}
	err = e.external(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.ReceiveHook(s, hookID, payload, deliveryID)
	})
	if errors.Is(err, core.ErrDuplicate) {
		return nil
	}
	return err
}

// Cancel requests cancellation of run runID. Requesting it again is accepted without effect.
func (e *Engine) Cancel(ctx context.Context, runID, reason string) error {
	err := e.external(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.RequestCancel(s, reason)
	})
	if errors.Is(err, core.ErrDuplicate) {
		return nil
	}
	return err
}

// Terminate ends run runID as failed at an operator's request, cancelling its unsettled steps,
// whatever its workflow code would decide. It works on blocked runs too.
func (e *Engine) Terminate(ctx context.Context, runID, reason string) error {
	return e.external(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.Terminate(s, reason)
	})
}

// Fire fires timer t: it appends wait.fired or step.retry_fired and asks for the run to be
// driven. A timer that is no longer pending is dropped without error.
func (e *Engine) Fire(ctx context.Context, t core.Timer) error {
	err := e.external(ctx, t.RunID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.Fire(s, t)
	})
	if errors.Is(err, core.ErrStale) {
		return nil
	}
	return err
}

// external appends the events compute derives from the run's current snapshot, re-deriving them
// after a conflict, then wakes the run's driver in this engine, if any, and asks for the run to
// be driven. It never waits for a driver: if one holds the run it reads a private projection.
func (e *Engine) external(ctx context.Context, runID string, compute func(*core.Snapshot) ([]event.Payload, error)) error {
	for {
		task, err := e.externalOnce(ctx, runID, compute)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		e.locks.poke(runID)
		return e.host.Resume(ctx, task)
	}
}

// externalOnce appends once and returns the task that resumes the run after the append.
func (e *Engine) externalOnce(ctx context.Context, runID string, compute func(*core.Snapshot) ([]event.Payload, error)) (Task, error) {
	rl, locked := e.locks.tryLock(runID)
	if locked {
		defer e.locks.unlock(runID, rl)
	}
	var s *core.Snapshot
	if locked {
		s, _ = e.cache.get(runID)
	}
	if s != nil {
		tail, err := e.store.Load(ctx, runID, s.Seq)
		if err == nil {
			err = s.ApplyAll(tail)
		}
		if err != nil {
			e.cache.drop(runID)
			return Task{}, err
		}
	} else {
		var err error
		if s, err = e.Snapshot(ctx, runID); err != nil {
			return Task{}, err
		}
		if locked {
			// Kept for later inputs; a driver still verifies and repairs it on its first load.
			e.cache.put(runID, s, false)
		}
	}
	events, err := compute(s)
	if err != nil {
		return Task{}, err
	}
	if err := e.commit(ctx, s, events); err != nil {
		return Task{}, err
	}
	e.observe(ctx, s)
	return Task{RunID: runID, Queue: s.Queue, Seq: s.Seq}, e.afterCommit(ctx, s, events)
}
