package batch

import (
	"github.com/flowrun/flow/internal/engine"
)

// Adapt returns the batch operations' view of an engine: its cancel, terminate and signal
// calls, and pause and unpause (Pauser) and reset (Resetter) where this build has them.
func Adapt(e *engine.Engine) Engine { return adapted{e} }

// adapted is *engine.Engine with the methods the operations need that it does not have in
// their shape. Pause and Unpause are its own, promoted (engine.Pause and engine.Unpause take
// the delivery ID as Pauser does).
type adapted struct{ *engine.Engine }

// ResetRun (Resetter) is wired to engine.Reset once it is on main:
//
//	func (a adapted) ResetRun(ctx context.Context, runID string, r ResetSpec, reason, requestID string) (string, error) {
//		return a.Reset(ctx, engine.ResetParams{RunID: runID, Mode: event.ResetMode(r.Mode), Seq: r.Seq, StepID: r.StepID,
//			Input: r.Input, DropInputs: r.DropInputs, Reason: reason, RequestID: requestID})
//	}
