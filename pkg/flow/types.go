package flow

import (
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// Status is a run's projected status.
type Status = core.Status

// Run statuses. Active: pending, running, suspended, cancelling, blocked. Terminal: completed,
// failed, cancelled, continued_as_new.
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
)

// RetryPolicy governs a step's attempts; the zero value means the defaults (3 attempts, 1s
// initial interval, coefficient 2, 1m cap, fail the run on exhaustion).
type RetryPolicy = event.RetryPolicy

// What a step's final failure does.
const (
	ExhaustionFailRun     = event.ExhaustionFailRun
	ExhaustionReturnError = event.ExhaustionReturnError
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

// Sentinels callers branch on with errors.Is.
var (
	ErrNonDeterminism  = core.ErrNonDeterminism
	ErrInvalidDecision = core.ErrInvalidDecision
	ErrInvalidHistory  = core.ErrInvalidHistory
	ErrNotFound        = core.ErrNotFound
	ErrTerminal        = core.ErrTerminal
	ErrInvalidInput    = core.ErrInvalidInput
	ErrAlreadyReceived = core.ErrAlreadyReceived
	ErrInvalidID       = event.ErrInvalidID
)
