package flow

import (
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// Cancellation says how [Context.CancelStep] and [Context.CancelChild] cancel a step or child
// the run scheduled: [TryCancel], [WaitCancelled] or [Abandon] (Temporal's cancellation types).
type Cancellation = event.Cancellation

// Cancellation policies.
const (
	// TryCancel settles the step or child as cancelled at once and asks its attempt to cancel:
	// the step's context is cancelled, the child's run gets run.cancel_requested. The workflow
	// goes on at once; a step whose attempt was in flight is marked side_effect_unknown.
	TryCancel = event.CancelTry
	// WaitCancelled asks the attempt to cancel and waits until it ends: the step settles as
	// cancelled when its code returns an error (return ctx.Err() once the context is done) and
	// as completed when it returns an output anyway; the child settles however its run ends.
	WaitCancelled = event.CancelWait
	// Abandon settles the step or child as cancelled at once and leaves the attempt alone: the
	// step's context is not cancelled (not even when the drive ends), the child's run goes on,
	// and their results are ignored.
	Abandon = event.CancelAbandon
)

// CancelStep cancels step id, which this run scheduled and which has not settled, with policy.
// With [TryCancel] and [Abandon] the step is settled by this decision; with [WaitCancelled] the
// run waits (re-issue the same decision) until the attempt ends. Guard it with
// [Context.StepSettled]: cancelling a settled step is an invalid decision, and re-issuing it
// with another policy is a non-determinism error. [Context.StepError] then reports a
// *StepFailure with Cancelled set.
func (c *Context) CancelStep(id string, policy Cancellation) Decision {
	return core.CancelStep{ID: id, Policy: policy}
}

// CancelChild cancels child id, which this run started and which has not settled, with policy.
// With [TryCancel] and [Abandon] the child settles as cancelled by this decision; with
// [WaitCancelled] the run waits until the child's run ends and [Context.Child] reports how it
// ended (cancelled, or completed or failed if it ended otherwise). Guard it with
// [Context.Child] == nil.
func (c *Context) CancelChild(id string, policy Cancellation) Decision {
	return core.CancelChild{ID: id, Policy: policy}
}

// StepSettled reports whether step id was scheduled and has settled: completed, failed for the
// last time, or cancelled.
func (c *Context) StepSettled(id string) bool {
	st, ok := c.s.Steps[id]
	return ok && st.Status.Settled()
}

// WithChildRetry gives the child a retry policy: a child run that fails (with an error kind
// the policy does not list as non-retryable) is started again, after the policy's backoff, as
// a new run "<child run ID>=_<attempt>", up to MaxAttempts runs; the parent sees the child
// settle only after the last one. OnExhaustion does not apply to children. The policy is
// recorded in child.scheduled and compared on replay.
func WithChildRetry(p RetryPolicy) ChildOption { return func(ch *Child) { ch.Retry = &p } }
