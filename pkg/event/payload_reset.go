package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// ResetMode says how the point of a reset was chosen (docs/reset.md).
type ResetMode string

const (
	// ResetToSeq: the caller gave the point, a sequence of the old run.
	ResetToSeq ResetMode = "seq"
	// ResetToStep: the point is the last reset point before the decision that scheduled a step,
	// so that the step runs again.
	ResetToStep ResetMode = "step"
	// ResetToLastDecision: the point is the last reset point before the old run's last decision.
	ResetToLastDecision ResetMode = "last_decision"
	// ResetRerun: a rerun from a step (ResetToStep), optionally with a new input.
	ResetRerun ResetMode = "rerun"
)

// Valid reports whether m is a known mode.
func (m ResetMode) Valid() bool {
	return slices.Contains([]ResetMode{ResetToSeq, ResetToStep, ResetToLastDecision, ResetRerun}, m)
}

// ResetFrom is run.started's record of the reset that created the run: the new run's events 2
// to Seq are copies of the old run's events 2 to Seq, byte for byte in their payloads and
// times, and its events Seq+1 to Seq+Reapplied are the inputs the old run recorded after Seq
// (up to CopiedTo) that the reset reapplied, with their delivery and update IDs.
type ResetFrom struct {
	// RunID is the old run, Seq the reset point: the old run's last event that was copied.
	RunID string `json:"run_id"`
	Seq   uint64 `json:"seq"`
	// Mode says how the point was chosen.
	Mode ResetMode `json:"mode"`
	// StepID is the step a step reset or a rerun runs again.
	StepID string `json:"step_id,omitempty"`
	// Reason is the operator's, as given to the reset.
	Reason string `json:"reason,omitempty"`
	// RequestID identifies the reset request; a repeat with it returns this run.
	RequestID string `json:"request_id,omitempty"`
	// DropInputs is set when the inputs after the point were dropped instead of reapplied.
	DropInputs bool `json:"drop_inputs,omitempty"`
	// InputReplaced is set when a rerun replaced the run's input (RunStarted.Input).
	InputReplaced bool `json:"input_replaced,omitempty"`
	// CopiedTo is the old run's last sequence when the reset read it; Reapplied counts the
	// inputs reapplied from the old run's events Seq+1..CopiedTo.
	CopiedTo  uint64 `json:"copied_to"`
	Reapplied int    `json:"reapplied,omitempty"`
	// SeedRunID is the run identity that ctx.Random and ctx.UUID derive their values from (with
	// the seed, which the reset copies): the old run's own SeedRunID, or the old run. The
	// copied decisions replay with the values they were made with.
	SeedRunID string `json:"seed_run_id"`
	// Readmit is set when the new run must be admitted anew by its flow control: a copied
	// run.admitted does not admit it (docs/flow-control.md). Set by every reset since it
	// existed; a reset recorded before kept the old run's admission.
	Readmit bool `json:"readmit,omitempty"`
	// AbortedUpdates are the updates the old run left unsettled when it ended before the reset
	// (their callers were answered "aborted"): copied, they stay aborted in the new run, and
	// they are not reapplied (docs/updates.md).
	AbortedUpdates []string `json:"aborted_updates,omitempty"`
}

func (r *ResetFrom) validate() error {
	if r == nil {
		return nil
	}
	var mode error
	if !r.Mode.Valid() {
		mode = fieldError("reset_from.mode", fmt.Sprintf("%q is not one of seq, step, last_decision, rerun", r.Mode))
	}
	var seq error
	if r.Seq == 0 || r.CopiedTo < r.Seq {
		seq = fieldError("reset_from.seq", fmt.Sprintf("point %d must be at least 1 and at most copied_to %d", r.Seq, r.CopiedTo))
	}
	return errors.Join(required("reset_from.run_id", r.RunID), required("reset_from.seed_run_id", r.SeedRunID), mode, seq)
}

// RunReset is recorded in the old run of a reset: it names the new run, the point and the
// mode. It may follow a run's terminal event (a reset of an ended run), as run.damage_accepted may;
// a reset of an active run records it and ends the run (step.cancelled and run.failed with
// cause operator) in the same commit. It is the reset's commit point: the new run's first
// commit is derived from it and the old run's events before it (docs/reset.md).
type RunReset struct {
	// NewRunID is the run the reset created; Seq the reset point (this run's last event copied);
	// Mode how it was chosen; StepID the step run again, for a step reset or a rerun; Reason the
	// operator's.
	NewRunID string    `json:"new_run_id"`
	Seq      uint64    `json:"seq"`
	Mode     ResetMode `json:"mode"`
	StepID   string    `json:"step_id,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	// RequestID identifies the reset request, as the new run's reset_from records it.
	RequestID string `json:"request_id,omitempty"`
	// DropInputs is set when the inputs after the point were dropped instead of reapplied.
	DropInputs bool `json:"drop_inputs,omitempty"`
	// Terminated is set when the reset ended this run (it was active).
	Terminated bool `json:"terminated,omitempty"`
	// Input is a rerun's new input, which replaces the run's in the new run.started.
	Input json.RawMessage `json:"input,omitempty"`
}

// EventType implements Payload.
func (*RunReset) EventType() Type { return TypeRunReset }

// PayloadFields implements Described.
func (p *RunReset) PayloadFields() []*json.RawMessage { return []*json.RawMessage{&p.Input} }

// Summarize implements Described.
func (p *RunReset) Summarize() string {
	s := fmt.Sprintf("reset as run %s from seq %d (%s)", p.NewRunID, p.Seq, p.Mode)
	if p.Terminated {
		s += ", ending this run"
	}
	return s
}

// Validate implements Payload.
func (p *RunReset) Validate() error {
	var mode error
	if !p.Mode.Valid() {
		mode = fieldError("mode", fmt.Sprintf("%q is not one of seq, step, last_decision, rerun", p.Mode))
	}
	var seq error
	if p.Seq == 0 {
		seq = fieldError("seq", "is required")
	}
	return errors.Join(required("new_run_id", p.NewRunID), mode, seq)
}
