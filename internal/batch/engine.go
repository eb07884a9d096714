package batch

import (
	"context"

	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/pkg/event"
)

// Adapt returns the batch operations' view of an engine: its cancel, terminate and signal
// calls, pause and unpause (Pauser) and reset (Resetter), so every Op is Supported.
func Adapt(e *engine.Engine) Engine { return adapted{e} }

// adapted is *engine.Engine with the methods the operations need that it does not have in
// their shape: ResetRun. Pause and Unpause are the engine's own, promoted (they take the
// delivery ID as Pauser does).
type adapted struct{ *engine.Engine }

var (
	_ Pauser   = adapted{}
	_ Resetter = adapted{}
)

// ResetRun resets run runID as r says, with the job's delivery ID as the reset's request ID:
// a repeat returns the same new run.
func (a adapted) ResetRun(ctx context.Context, runID string, r ResetSpec, reason, requestID string) (string, error) {
	return a.Reset(ctx, engine.ResetParams{RunID: runID, Mode: event.ResetMode(r.Mode), Seq: r.Seq, StepID: r.StepID,
		Input: r.Input, DropInputs: r.DropInputs, Reason: reason, RequestID: requestID})
}
