package flow

import (
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// Status is a run's projected status.
type Status = core.Status

// Run statuses. Active: pending, queued, running, suspended, cancelling, blocked, paused.
// Terminal: completed, failed, cancelled, continued_as_new.
const (
	StatusPending = core.StatusPending
	// StatusQueued: started under flow control, waiting for admission.
	StatusQueued         = core.StatusQueued
	StatusRunning        = core.StatusRunning
	StatusSuspended      = core.StatusSuspended
	StatusCancelling     = core.StatusCancelling
	StatusBlocked        = core.StatusBlocked
	StatusCompleted      = core.StatusCompleted
	StatusFailed         = core.StatusFailed
	StatusCancelled      = core.StatusCancelled
	StatusContinuedAsNew = core.StatusContinuedAsNew
	// StatusPaused: the run is paused (run.paused): it decides nothing and starts no step
	// attempt until it is unpaused. See docs/pause.md.
	StatusPaused = core.StatusPaused
)

// RetryPolicy governs a step's attempts; the zero value means the defaults (3 attempts, 1s
// initial interval, coefficient 2, 1m cap, fail the run on exhaustion).
type RetryPolicy = event.RetryPolicy

// What a step's final failure does, as a retry policy's OnExhaustion.
const (
	// ExhaustionFailRun fails the run (the default).
	ExhaustionFailRun = event.ExhaustionFailRun
	// ExhaustionReturnError settles the step as failed and lets the workflow go on:
	// [Context.StepError] reports it.
	ExhaustionReturnError = event.ExhaustionReturnError
	// ExhaustionPauseRun pauses the run when the step exhausts its attempts with a retryable
	// error, instead of failing it: fix what fails, unpause the run (`flow unpause RUN`,
	// [PauseClient.UnpauseRun]), and the step gets a fresh attempt:
	//
	//	flow.RetryPolicy{MaxAttempts: 3, OnExhaustion: flow.ExhaustionPauseRun}
	ExhaustionPauseRun = event.ExhaustionPauseRun
)

// Child cancellation policies.
const (
	CancelPolicyRequest = event.CancelPolicyRequest
	CancelPolicyAbandon = event.CancelPolicyAbandon
)

// NonDeterminismError reports that workflow code, for the same history, produced a decision
// that differs from the recorded one; it names the run, the identity, the field, both values and
// the sequence of the recording event.
type NonDeterminismError = core.NonDeterminismError

// InvalidDecisionError reports a decision that can never be valid.
type InvalidDecisionError = core.InvalidDecisionError

// PanicError is a panic recovered from workflow code.
type PanicError = core.PanicError
