package flow

import (
	"context"
	"errors"
	"strings"

	"github.com/flowrun/flow/pkg/event"
)

// StepInfo describes the attempt a step function is running.
type StepInfo struct {
	// RunID is the run the step belongs to; StepID the step's ID in it.
	RunID  string
	StepID string
	// Name is the registered step function.
	Name string
	// Attempt counts from 1.
	Attempt int
}

type stepInfoKey struct{}

// StepInfoFrom returns the info of the step attempt ctx belongs to.
func StepInfoFrom(ctx context.Context) (StepInfo, bool) {
	info, ok := ctx.Value(stepInfoKey{}).(StepInfo)
	return info, ok
}

// IdempotencyKey returns the business idempotency key of an external effect on resource made by
// the step attempt ctx belongs to: "<run ID>:<step ID>:<resource>", for example
// "order-2026-0001:reserve-stock:sku-8842". It is the same on every attempt and every worker, so
// a target system that deduplicates by it applies the effect once although the step may run
// more than once. With an empty resource the key is "<run ID>:<step ID>". Outside a step it
// panics: the key would not identify anything.
func IdempotencyKey(ctx context.Context, resource string) string {
	info, ok := StepInfoFrom(ctx)
	if !ok {
		panic("flow: IdempotencyKey called outside a step function")
	}
	parts := []string{info.RunID, info.StepID}
	if resource != "" {
		parts = append(parts, resource)
	}
	return strings.Join(parts, ":")
}

// Error kinds Flow assigns itself ([KindOf] returns them).
const (
	// KindError is the kind of an error that does not declare one.
	KindError = "error"
	// KindPanic: the step function panicked.
	KindPanic = "panic"
	// KindInvalidInput: the step's input does not decode into its input type. Not retried.
	KindInvalidInput = "invalid_input"
	// KindInvalidOutput: the step's output does not encode to JSON. Not retried.
	KindInvalidOutput = "invalid_output"
	// KindUnknownStep: no step function of that name is registered.
	KindUnknownStep = "unknown_step"

	// The kinds of timeouts (docs/timeouts.md). A step attempt that a timeout ends fails with
	// the kind of the timeout and is retried under the step's retry policy, which may list
	// these kinds as non-retryable. A run that its run or execution timeout ends fails with
	// KindRunTimeout or KindExecutionTimeout.
	KindScheduleToStartTimeout = event.TimeoutScheduleToStart
	KindStartToCloseTimeout    = event.TimeoutStartToClose
	KindHeartbeatTimeout       = event.TimeoutHeartbeat
	KindRunTimeout             = event.TimeoutRun
	KindExecutionTimeout       = event.TimeoutExecution
)

// Error is an error with a kind, which retry policies match (RetryPolicy.NonRetryable) and
// which is recorded in history. Return it, or wrap it, from a step or workflow.
type Error struct {
	// Kind classifies the error (one of the Kind constants or the application's own);
	// RetryPolicy.NonRetryable and [KindOf] match it.
	Kind string
	// Message is recorded in history; Error returns it.
	Message string
	// NonRetryable fails the step at once, whatever attempts are left.
	NonRetryable bool
	// Cause is the underlying error, if any; it is not recorded.
	Cause error
}

// NewError returns an error of kind with message.
func NewError(kind, message string) *Error { return &Error{Kind: kind, Message: message} }

func (e *Error) Error() string {
	if e.Message == "" && e.Cause != nil {
		return e.Cause.Error()
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// ErrorKind returns the kind.
func (e *Error) ErrorKind() string { return e.Kind }

// NonRetryable marks err so that the step fails at once. It keeps err's kind.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: KindOf(err), Message: err.Error(), NonRetryable: true, Cause: err}
}

// IsNonRetryable reports whether err, or an error it wraps, is an *Error marked NonRetryable.
func IsNonRetryable(err error) bool {
	var e *Error
	for err != nil {
		if errors.As(err, &e) {
			if e.NonRetryable {
				return true
			}
			err = e.Cause
			continue
		}
		return false
	}
	return false
}

// KindOf returns the kind of err: that of the first error in its chain with an ErrorKind()
// method (such as *Error), else KindError.
func KindOf(err error) string {
	var k interface{ ErrorKind() string }
	if errors.As(err, &k) && k.ErrorKind() != "" {
		return k.ErrorKind()
	}
	return KindError
}
