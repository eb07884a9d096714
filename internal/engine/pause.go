package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/pauses"
	"github.com/flowrun/flow/pkg/event"
)

// Pausing runs, definitions and queues (docs/pause.md).
//
// A run's pause is in its history (run.paused, run.unpaused): the core decides nothing while
// it holds, and the driver starts no attempt. A definition's or queue's pause is a FLOW_PAUSES
// entry (Pauses): a driver that finds the run's definition or queue paused makes no decision
// and starts no attempt; it lets the attempts it runs finish and records their results, then
// returns a *HeldError, and the worker parks the run until the pause is gone.

// Pauses keeps the definition and queue pauses (FLOW_PAUSES).
type Pauses interface {
	// Held returns the pause that holds runs of definition on queue ("" is the default
	// queue), if any: the definition's, else the queue's. It answers from memory, at once.
	Held(definition, queue string) (pauses.Pause, bool)
	// Put records p, replacing a pause of the same scope and name.
	Put(ctx context.Context, p pauses.Pause) error
	// Delete removes the pause of scope and name, and reports whether there was one.
	Delete(ctx context.Context, scope, name string) (bool, error)
	// List returns the pauses, read from the bucket.
	List(ctx context.Context) ([]pauses.Pause, error)
}

// ErrNoPauses is returned by the definition and queue pause calls of an engine without
// Config.Pauses.
var ErrNoPauses = errors.New("flow: this engine keeps no definition or queue pauses (engine.Config.Pauses)")

// HeldError reports a run that a definition or queue pause holds: the drive made no decision
// and started no attempt, and recorded the results of the attempts that were running.
type HeldError struct {
	RunID, Definition, Queue, Build string
	// Seq is the run's sequence when the drive stopped.
	Seq   uint64
	Pause pauses.Pause
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("flow: run %q is held: %s", e.RunID, e.Pause.Describe())
}

type actorKey struct{}

// WithActor returns ctx naming who makes the requests made with it (an operator, a batch job),
// which run.paused and run.unpaused record.
func WithActor(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, actorKey{}, who)
}

// Actor returns who WithActor named in ctx, or "".
func Actor(ctx context.Context) string {
	who, _ := ctx.Value(actorKey{}).(string)
	return who
}

// Pause pauses run runID, or the latest run it continued as, and returns the ID of the run it
// paused: until Unpause it makes no decision and starts no step attempt, while its inputs and
// timers are still recorded. A request repeated with the same delivery ID, or made while the
// run is paused, is accepted without effect. The pause records Actor(ctx) as who paused it.
func (e *Engine) Pause(ctx context.Context, runID, reason, deliveryID string) (string, error) {
	by := Actor(ctx)
	return acceptDuplicate(e.forward(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.PauseRun(s, reason, by, deliveryID)
	}))
}

// Unpause ends the pause of run runID, or of the latest run it continued as, and returns the ID
// of that run: the decision that is due is made, held attempts start, and each step that
// exhausted its attempts under flow.ExhaustionPauseRun gets a fresh attempt. A request repeated with the
// same delivery ID, or made while the run is not paused, is accepted without effect.
func (e *Engine) Unpause(ctx context.Context, runID, reason, deliveryID string) (string, error) {
	by := Actor(ctx)
	return acceptDuplicate(e.forward(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.UnpauseRun(s, reason, by, deliveryID, e.now(s))
	}))
}

// PauseDefinition pauses every run of definition: workers make no decision and start no step
// attempt of them until UnpauseDefinition, while their inputs and timers are still recorded.
// Pausing a paused definition again replaces its note.
func (e *Engine) PauseDefinition(ctx context.Context, definition, note string) (pauses.Pause, error) {
	return e.pauseScope(ctx, pauses.ScopeDefinition, definition, note)
}

// PauseQueue pauses every run on task queue queue, as PauseDefinition does a definition's.
func (e *Engine) PauseQueue(ctx context.Context, queue, note string) (pauses.Pause, error) {
	return e.pauseScope(ctx, pauses.ScopeQueue, queue, note)
}

// UnpauseDefinition ends the pause of definition and reports whether it was paused. The runs it
// held are dispatched again by the history service, which follows FLOW_PAUSES.
func (e *Engine) UnpauseDefinition(ctx context.Context, definition string) (bool, error) {
	return e.unpauseScope(ctx, pauses.ScopeDefinition, definition)
}

// UnpauseQueue ends the pause of queue, as UnpauseDefinition does a definition's.
func (e *Engine) UnpauseQueue(ctx context.Context, queue string) (bool, error) {
	return e.unpauseScope(ctx, pauses.ScopeQueue, queue)
}

// PausedScopes returns the definition and queue pauses.
func (e *Engine) PausedScopes(ctx context.Context) ([]pauses.Pause, error) {
	if e.pauses == nil {
		return nil, ErrNoPauses
	}
	return e.pauses.List(ctx)
}

func (e *Engine) pauseScope(ctx context.Context, scope, name, note string) (pauses.Pause, error) {
	if e.pauses == nil {
		return pauses.Pause{}, ErrNoPauses
	}
	if scope == pauses.ScopeQueue && name == "" {
		name = core.DefaultQueue
	}
	if err := event.ValidateName(scope, name); err != nil {
		return pauses.Pause{}, fmt.Errorf("%w: %w", core.ErrInvalidInput, err)
	}
	p := pauses.Pause{Scope: scope, Name: name, Note: note, By: Actor(ctx), At: e.clock.Now().UTC().Truncate(time.Millisecond)}
	return p, e.pauses.Put(ctx, p)
}

func (e *Engine) unpauseScope(ctx context.Context, scope, name string) (bool, error) {
	if e.pauses == nil {
		return false, ErrNoPauses
	}
	if scope == pauses.ScopeQueue && name == "" {
		name = core.DefaultQueue
	}
	if err := event.ValidateName(scope, name); err != nil {
		return false, fmt.Errorf("%w: %w", core.ErrInvalidInput, err)
	}
	return e.pauses.Delete(ctx, scope, name)
}

// held returns the definition or queue pause that holds the driver's run, if any.
func (d *driver) held() (pauses.Pause, bool) {
	if d.e.pauses == nil || d.s == nil {
		return pauses.Pause{}, false
	}
	return d.e.pauses.Held(d.s.Spec.Definition, d.s.Queue)
}

// holds reports whether the run may start no attempt now: it is paused, or its definition or
// queue is, or it waits for admission under flow control (a reset run's copied attempts run
// once it is admitted anew).
func (d *driver) holds() bool {
	if d.s.IsPaused() || d.s.Queued() {
		return true
	}
	_, ok := d.held()
	return ok
}

// heldError is the error of a drive that stops because pause p holds its run.
func (d *driver) heldError(p pauses.Pause) error {
	return &HeldError{RunID: d.runID, Definition: d.s.Spec.Definition, Queue: d.s.Queue, Build: d.s.Spec.BuildID, Seq: d.s.Seq, Pause: p}
}
