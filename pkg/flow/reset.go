package flow

import (
	"context"
	"fmt"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
)

// ResetOptions choose the point of [Client.Reset]: exactly one of Seq, StepID and LastDecision.
// See docs/reset.md.
type ResetOptions struct {
	// Seq resets to a reset point of the old run: its events 1..Seq are copied. A sequence that
	// is not a reset point is refused with an error listing the nearest ones.
	Seq uint64
	// StepID resets to the last reset point before the decision that scheduled the step, so
	// that the step runs again.
	StepID string
	// LastDecision resets to the last reset point before the old run's last decision.
	LastDecision bool
	// DropInputs drops the signals, hook deliveries and updates recorded after the point instead
	// of reapplying them in the new run.
	DropInputs bool
	// Reason is recorded in both runs' reset events.
	Reason string
	// RequestID makes the reset idempotent: a repeat with it returns the same new run. Without
	// it, a repeat with the same point and options does.
	RequestID string
}

// RerunOptions adjust [Client.Rerun]. The zero value works.
type RerunOptions struct {
	// Input, when not nil, replaces the run's input in the new run (encoded to JSON). The
	// copied decisions before the step are checked against it on replay: one that now differs
	// blocks the new run with a non-determinism error naming the field.
	Input any
	// DropInputs, Reason and RequestID are as in [ResetOptions].
	DropInputs bool
	Reason     string
	RequestID  string
}

// ResetResult names the run a reset created.
type ResetResult struct {
	// RunID is the old run, NewRunID the new one; Point is the old run's last copied event.
	RunID, NewRunID string
	Point           uint64
	// Mode says how the point was chosen: seq, step, last_decision or rerun.
	Mode event.ResetMode
	// Reapplied counts the inputs after the point reapplied in the new run.
	Reapplied int
}

// Reset starts a new run that copies run runID's history up to the point opts choose, reapplies
// (or drops) the inputs recorded after it, and links both runs (run.started's reset_from in the
// new one, run.reset in the old one, which ends if it was active). Errors wrap ErrNotFound or
// ErrInvalidInput (a point that is not a reset point, with the nearest ones in the message; no
// point chosen, opts nil among them).
func (c *Client) Reset(ctx context.Context, runID string, opts *ResetOptions) (*ResetResult, error) {
	if opts == nil {
		opts = &ResetOptions{}
	}
	req := api.ResetRequest{DropInputs: opts.DropInputs, Reason: opts.Reason, RequestID: opts.RequestID}
	n := 0
	if opts.Seq > 0 {
		req.Mode, req.Seq = string(event.ResetToSeq), opts.Seq
		n++
	}
	if opts.StepID != "" {
		req.Mode, req.StepID = string(event.ResetToStep), opts.StepID
		n++
	}
	if opts.LastDecision {
		req.Mode = string(event.ResetToLastDecision)
		n++
	}
	if n != 1 {
		return nil, fmt.Errorf("%w: choose the reset point with exactly one of Seq, StepID and LastDecision", ErrInvalidInput)
	}
	return c.reset(ctx, runID, req)
}

// Rerun is a reset of run runID to just before the decision that scheduled step stepID, so that
// the step and everything after it run again; opts.Input replaces the run's input. opts may be
// nil.
func (c *Client) Rerun(ctx context.Context, runID, stepID string, opts *RerunOptions) (*ResetResult, error) {
	if opts == nil {
		opts = &RerunOptions{}
	}
	req := api.ResetRequest{Mode: string(event.ResetRerun), StepID: stepID, DropInputs: opts.DropInputs, Reason: opts.Reason, RequestID: opts.RequestID}
	if opts.Input != nil {
		b, err := encode(opts.Input)
		if err != nil {
			return nil, fmt.Errorf("%w: encoding the rerun's input: %w", ErrInvalidInput, err)
		}
		req.Input = b
	}
	return c.reset(ctx, runID, req)
}

// A reset is sent once, not retried: copying a long history may take longer than a retried
// request's attempt. Without a deadline in ctx, callTimeout bounds it.
func (c *Client) reset(ctx context.Context, runID string, req api.ResetRequest) (*ResetResult, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	var resp api.ResetResponse
	if err := c.t.json(ctx, call{to: ingress, subject: api.ResetSubject(runID)}, req, &resp); err != nil {
		return nil, err
	}
	return &ResetResult{RunID: resp.RunID, NewRunID: resp.NewRunID, Point: resp.Point, Mode: event.ResetMode(resp.Mode), Reapplied: resp.Reapplied}, nil
}
