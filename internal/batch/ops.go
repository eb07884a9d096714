package batch

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/store"
)

// Engine is what the operations need of an engine (*engine.Engine has it).
type Engine interface {
	CancelDelivery(ctx context.Context, runID, reason, deliveryID string) (string, error)
	TerminateDelivery(ctx context.Context, runID, reason, deliveryID string) (string, error)
	Signal(ctx context.Context, runID, name string, payload []byte, deliveryID string) (string, error)
	// Snapshot reads a run, to say how a target that refused the operation ended.
	Snapshot(ctx context.Context, runID string) (*core.Snapshot, error)
}

// Pauser is an engine that pauses and unpauses runs, idempotently per delivery ID
// (docs/pause.md). A job of OpPause or OpUnpause needs an engine that is one.
type Pauser interface {
	Pause(ctx context.Context, runID, reason, deliveryID string) (string, error)
	Unpause(ctx context.Context, runID, reason, deliveryID string) (string, error)
}

// Resetter is an engine that resets runs (docs/reset.md): a new run from a point of the old
// one's history, the same new run for a repeat of the request ID. A job of OpReset needs an
// engine that is one.
type Resetter interface {
	ResetRun(ctx context.Context, runID string, r ResetSpec, reason, requestID string) (string, error)
}

// Target is one run of a job, as an operation sees it.
type Target struct {
	JobID string
	RunID string
	// DeliveryID is DeliveryID(JobID, RunID): every repeat of the operation carries it.
	DeliveryID string
	Spec       *Spec
}

// Operation applies a job's operation to one target and returns the run that received it. It
// must be idempotent by t.DeliveryID: a repeat, after its first application was committed,
// returns nil (the target is reported applied again, and counted once).
type Operation func(ctx context.Context, e Engine, t Target) (string, error)

// ErrUnsupported is returned for an operation this build's engine does not offer.
var ErrUnsupported = errors.New("batch: operation not supported by this engine")

// Operations is the dispatch table: one entry per Op.
var Operations = map[Op]Operation{
	OpCancel: func(ctx context.Context, e Engine, t Target) (string, error) {
		return e.CancelDelivery(ctx, t.RunID, t.Spec.Reason, t.DeliveryID)
	},
	OpTerminate: func(ctx context.Context, e Engine, t Target) (string, error) {
		return e.TerminateDelivery(ctx, t.RunID, t.Spec.Reason, t.DeliveryID)
	},
	OpSignal: func(ctx context.Context, e Engine, t Target) (string, error) {
		return e.Signal(ctx, t.RunID, t.Spec.Signal, t.Spec.Payload, t.DeliveryID)
	},
	OpPause: func(ctx context.Context, e Engine, t Target) (string, error) {
		p, ok := e.(Pauser)
		if !ok {
			return t.RunID, fmt.Errorf("%w: pause", ErrUnsupported)
		}
		return p.Pause(ctx, t.RunID, t.Spec.Reason, t.DeliveryID)
	},
	OpUnpause: func(ctx context.Context, e Engine, t Target) (string, error) {
		p, ok := e.(Pauser)
		if !ok {
			return t.RunID, fmt.Errorf("%w: unpause", ErrUnsupported)
		}
		return p.Unpause(ctx, t.RunID, t.Spec.Reason, t.DeliveryID)
	},
	OpReset: func(ctx context.Context, e Engine, t Target) (string, error) {
		r, ok := e.(Resetter)
		if !ok || t.Spec.Reset == nil {
			return t.RunID, fmt.Errorf("%w: reset", ErrUnsupported)
		}
		return r.ResetRun(ctx, t.RunID, *t.Spec.Reset, t.Spec.Reason, t.DeliveryID)
	},
}

// Supported returns nil if engine e can apply op, else an error wrapping ErrUnsupported.
func Supported(e Engine, op Op) error {
	switch op {
	case OpPause, OpUnpause:
		if _, ok := e.(Pauser); !ok {
			return fmt.Errorf("%w: %s (this build has no run pause)", ErrUnsupported, op)
		}
	case OpReset:
		if _, ok := e.(Resetter); !ok {
			return fmt.Errorf("%w: reset (this build has no run reset)", ErrUnsupported)
		}
	}
	return nil
}

// classify turns an operation's error into the target's outcome: applied, skipped with why
// (the run ended, another request cancelled it, it is gone), failed, or retry (a transient
// error: the operation is tried again).
func classify(err error) (o Outcome, reason string, retry bool) {
	switch {
	case err == nil:
		return Applied, "", false
	case errors.Is(err, core.ErrTerminal):
		return Skipped, "already ended", false // the caller names the status
	case errors.Is(err, core.ErrCancelRequested):
		return Skipped, "cancellation already requested", false
	case errors.Is(err, core.ErrNotFound):
		return Skipped, "not found", false
	case errors.Is(err, core.ErrInvalidInput), errors.Is(err, core.ErrDeliveryConflict), errors.Is(err, ErrUnsupported),
		errors.Is(err, core.ErrInvalidHistory), errors.Is(err, store.ErrDamaged), errors.Is(err, engine.ErrResetConflict):
		return Failed, err.Error(), false
	}
	return Failed, err.Error(), true
}
