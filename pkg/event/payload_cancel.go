package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Cancellation says how a workflow cancels one step or one child it scheduled (flow's
// ctx.CancelStep and ctx.CancelChild), after Temporal's activity and child workflow
// cancellation types. It is recorded in the event that records the decision and compared on
// replay.
type Cancellation string

const (
	// CancelTry settles the step or child as cancelled at once and asks the attempt (the step's
	// attempt in flight, the child's run) to cancel; the workflow goes on immediately.
	CancelTry Cancellation = "try_cancel"
	// CancelWait asks the attempt to cancel and settles the step or child only when the attempt
	// ends (step.cancel_requested, child.cancel_requested): the workflow waits until then.
	CancelWait Cancellation = "wait_cancelled"
	// CancelAbandon settles the step or child as cancelled at once and leaves the attempt alone:
	// it is not told, and its result is ignored.
	CancelAbandon Cancellation = "abandon"
)

// Valid reports whether c is a known cancellation.
func (c Cancellation) Valid() bool {
	return c == CancelTry || c == CancelWait || c == CancelAbandon
}

func validCancellation(field string, c Cancellation, optional bool) error {
	if c == "" && optional || c.Valid() {
		return nil
	}
	return fieldError(field, fmt.Sprintf("must be try_cancel, wait_cancelled or abandon; got %q", c))
}

// StepCancelRequested records a workflow's decision to cancel step StepID, whose attempt
// Attempt is in flight, with Policy wait_cancelled: whoever runs the attempt is asked to cancel
// it, and the step settles when the attempt ends. An attempt that reports itself cancelled
// (returns an error wrapping context.Canceled) or fails settles the step as cancelled
// (step.cancelled with policy wait_cancelled); one that completes settles it as completed.
type StepCancelRequested struct {
	// StepID is the step; Attempt the attempt in flight; Policy the cancellation ctx.CancelStep
	// asked for; Reason why.
	StepID  string       `json:"step_id"`
	Attempt int          `json:"attempt"`
	Policy  Cancellation `json:"policy"`
	Reason  string       `json:"reason,omitempty"`
}

// ChildCancelRequested records a workflow's decision to cancel child ChildID with Policy
// wait_cancelled: the child's run RunID (the attempt running now) is asked to cancel
// (run.cancel_requested, appended by whoever follows the history), and the child settles with
// child.settled when that run ends, however it ends.
type ChildCancelRequested struct {
	// ChildID is the child's ID in the parent; RunID the child run asked to cancel.
	ChildID string `json:"child_id"`
	RunID   string `json:"run_id"`
	// Policy is the cancellation ctx.CancelChild asked for; Reason is recorded in the child's
	// run.cancel_requested.
	Policy Cancellation `json:"policy"`
	Reason string       `json:"reason,omitempty"`
}

// ChildRetryScheduled records that the run of attempt Attempt-1 of child ChildID, FailedRunID,
// failed with Error, and that the child's retry policy starts attempt Attempt as run RunID once
// Due has passed. The parent sees child.settled only after the last attempt.
type ChildRetryScheduled struct {
	// ChildID is the child; Attempt the attempt scheduled and RunID the run it will start
	// (ChildAttemptRunID); Due when it starts.
	ChildID string    `json:"child_id"`
	Attempt int       `json:"attempt"`
	RunID   string    `json:"run_id"`
	Due     time.Time `json:"due"`
	// FailedRunID is the child run that failed, and Error its error.
	FailedRunID string    `json:"failed_run_id"`
	Error       ErrorInfo `json:"error"`
}

// ChildRetryFired records that a child retry's backoff has elapsed: the run RunID of attempt
// Attempt is started from here on (by whoever follows the history).
type ChildRetryFired struct {
	// ChildID is the child; Attempt the attempt now due; RunID the new child run it starts
	// (ChildAttemptRunID).
	ChildID string `json:"child_id"`
	Attempt int    `json:"attempt"`
	RunID   string `json:"run_id"`
}

func (*StepCancelRequested) EventType() Type  { return TypeStepCancelRequested }
func (*ChildCancelRequested) EventType() Type { return TypeChildCancelRequested }
func (*ChildRetryScheduled) EventType() Type  { return TypeChildRetryScheduled }
func (*ChildRetryFired) EventType() Type      { return TypeChildRetryFired }

func (*StepCancelRequested) PayloadFields() []*json.RawMessage  { return nil }
func (*ChildCancelRequested) PayloadFields() []*json.RawMessage { return nil }
func (*ChildRetryScheduled) PayloadFields() []*json.RawMessage  { return nil }
func (*ChildRetryFired) PayloadFields() []*json.RawMessage      { return nil }

func (p *StepCancelRequested) Summarize() string {
	return fmt.Sprintf("cancel %s attempt %d requested (%s): %s", p.StepID, p.Attempt, p.Policy, orNone(p.Reason))
}

func (p *ChildCancelRequested) Summarize() string {
	return fmt.Sprintf("cancel child %s (run %s) requested (%s): %s", p.ChildID, p.RunID, p.Policy, orNone(p.Reason))
}

func (p *ChildRetryScheduled) Summarize() string {
	return fmt.Sprintf("child %s attempt %d as run %s due %s, after run %s failed: %s",
		p.ChildID, p.Attempt, p.RunID, p.Due.Format(summaryClock), p.FailedRunID, p.Error.Error())
}

func (p *ChildRetryFired) Summarize() string {
	return fmt.Sprintf("child %s attempt %d starts as run %s", p.ChildID, p.Attempt, p.RunID)
}

// Validate implements Payload.
func (p *StepCancelRequested) Validate() error {
	return errors.Join(required("step_id", p.StepID), attempt("attempt", p.Attempt), validCancellation("policy", p.Policy, false))
}

// Validate implements Payload.
func (p *ChildCancelRequested) Validate() error {
	return errors.Join(required("child_id", p.ChildID), required("run_id", p.RunID), validCancellation("policy", p.Policy, false))
}

// Validate implements Payload.
func (p *ChildRetryScheduled) Validate() error {
	var due error
	if p.Due.IsZero() {
		due = fieldError("due", "is required")
	}
	var next error
	if p.Attempt < 2 {
		next = fieldError("attempt", fmt.Sprintf("must be at least 2, got %d", p.Attempt))
	}
	return errors.Join(required("child_id", p.ChildID), next, required("run_id", p.RunID), due,
		required("failed_run_id", p.FailedRunID), required("error.message", p.Error.Message))
}

// Validate implements Payload.
func (p *ChildRetryFired) Validate() error {
	return errors.Join(required("child_id", p.ChildID), attempt("attempt", p.Attempt), required("run_id", p.RunID))
}

// ChildAttemptRunID derives the run ID of attempt attempt of a child whose first run is
// runID ("<parent>=<child ID>"): runID itself for attempt 1, else "<runID>=_<attempt>". The '_'
// keeps it apart from the child's own children (decision IDs start with a letter) and from its
// continuations (a numeric suffix, see SuccessorRunID).
func ChildAttemptRunID(runID string, attempt int) string {
	if attempt <= 1 {
		return runID
	}
	return fmt.Sprintf("%s=_%d", runID, attempt)
}
