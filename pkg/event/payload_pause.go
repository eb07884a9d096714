package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// PauseCause says why a run was paused.
type PauseCause string

const (
	// PauseOperator: an operator (CLI, client, ingress, batch job) paused the run.
	PauseOperator PauseCause = "operator"
	// PauseStepExhausted: a step exhausted its attempts under a retry policy whose
	// OnExhaustion is ExhaustionPauseRun. The step waits, unsettled, for the run's unpause,
	// which schedules a fresh attempt of it.
	PauseStepExhausted PauseCause = "step_exhausted"
)

func (c PauseCause) valid() bool { return c == PauseOperator || c == PauseStepExhausted }

// RunPaused pauses a run: from here until run.unpaused no decision is made and no step attempt
// starts. Inputs (signals, hook deliveries, updates, cancellation requests) and timer fires are
// still recorded; an attempt that was already running finishes and its result is recorded, and
// its retry waits. Termination still ends a paused run.
//
// A run is paused once: a second run.paused while paused is allowed only with cause
// step_exhausted, for another step of the run that exhausted its attempts.
type RunPaused struct {
	// Reason says why; Cause what paused the run (an operator, or a step's exhausted retries).
	Reason string     `json:"reason,omitempty"`
	Cause  PauseCause `json:"cause"`
	// By names who paused the run (an operator, a batch job); empty for a step's exhaustion.
	By string `json:"by,omitempty"`
	// DeliveryID identifies the request: a request repeated with it is applied once.
	DeliveryID string `json:"delivery_id,omitempty"`
	// StepID, Attempt and Error name the step that exhausted its attempts (cause
	// step_exhausted), its last attempt and that attempt's error.
	StepID  string     `json:"step_id,omitempty"`
	Attempt int        `json:"attempt,omitempty"`
	Error   *ErrorInfo `json:"error,omitempty"`
	// TraceParent is the W3C traceparent of the request's span, when there was one.
	TraceParent string `json:"traceparent,omitempty"`
}

// RunUnpaused ends a run's pause: the decision that is due is made, the attempts that were held
// start, and each step paused by its exhaustion gets a fresh attempt, recorded in the same
// commit (step.retry_scheduled due at once, then step.retry_fired).
type RunUnpaused struct {
	// Reason says why; By who asked; DeliveryID identifies the request, so that a repeat is
	// applied once.
	Reason     string `json:"reason,omitempty"`
	By         string `json:"by,omitempty"`
	DeliveryID string `json:"delivery_id,omitempty"`
	// Paused is how long the run was paused, from its first run.paused.
	Paused Duration `json:"paused,omitempty"`
	// TraceParent is the W3C traceparent of the span that asked for the unpause, when there was
	// one.
	TraceParent string `json:"traceparent,omitempty"`
}

func (*RunPaused) EventType() Type   { return TypeRunPaused }
func (*RunUnpaused) EventType() Type { return TypeRunUnpaused }

func (*RunPaused) PayloadFields() []*json.RawMessage   { return nil }
func (*RunUnpaused) PayloadFields() []*json.RawMessage { return nil }

func (p *RunPaused) Summarize() string {
	s := fmt.Sprintf("paused (%s): %s", p.Cause, orNone(p.Reason))
	if p.By != "" {
		s += ", by " + p.By
	}
	if p.StepID != "" {
		s += fmt.Sprintf(", step %s attempt %d", p.StepID, p.Attempt)
		if p.Error != nil {
			s += " failed: " + p.Error.Error()
		}
	}
	return s
}

func (p *RunUnpaused) Summarize() string {
	s := fmt.Sprintf("unpaused after %s: %s", time.Duration(p.Paused), orNone(p.Reason))
	if p.By != "" {
		s += ", by " + p.By
	}
	return s
}

// Validate implements Payload.
func (p *RunPaused) Validate() error {
	var errs []error
	if !p.Cause.valid() {
		errs = append(errs, fieldError("cause", fmt.Sprintf("must be operator or step_exhausted; got %q", p.Cause)))
	}
	if p.Cause == PauseStepExhausted {
		errs = append(errs, required("step_id", p.StepID), attempt("attempt", p.Attempt))
		if p.Error == nil {
			errs = append(errs, fieldError("error", "is required for cause step_exhausted"))
		}
	}
	return errors.Join(errs...)
}

// Validate implements Payload.
func (p *RunUnpaused) Validate() error { return nil }
