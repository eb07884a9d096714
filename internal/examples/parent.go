package examples

import (
	"encoding/json"

	"github.com/flowrun/flow/pkg/flow"
)

// ParentInput is the input of the parent workflow.
type ParentInput struct {
	// Sleep is how long each child sleeps, as a Go duration. Defaults to "30s".
	Sleep string `json:"sleep"`
}

// ChildInput is the input, and the output, of the child workflow.
type ChildInput struct {
	// Sleep is how long the child sleeps, as a Go duration. Defaults to "30s".
	Sleep string `json:"sleep"`
	// Policy is the cancellation policy the parent started the child with, for the reader.
	Policy string `json:"policy,omitempty"`
}

// parentChildren returns the parent workflow's children, one under each cancellation policy.
// Each child's ID is its policy's name, so its run is "<parent run>=request_cancel" or
// "<parent run>=abandon".
func parentChildren(sleep string) []flow.Child {
	children := []flow.Child{
		{CancelPolicy: flow.CancelPolicyRequest},
		{CancelPolicy: flow.CancelPolicyAbandon},
	}
	for i := range children {
		c := &children[i]
		c.ID, c.Definition = string(c.CancelPolicy), "child"
		c.Input = ChildInput{Sleep: sleep, Policy: string(c.CancelPolicy)}
	}
	return children
}

// Parent starts two children of the child workflow as one batch, each sleeping Sleep: child
// "request_cancel" under flow.CancelPolicyRequest and child "abandon" under
// flow.CancelPolicyAbandon. Once both completed it completes with their outputs by child ID:
// {"request_cancel": {"sleep": ..., "policy": "request_cancel"}, "abandon": {...}}. A child
// that fails or is cancelled (say by `flow cancel` of the child's own run) fails the parent with
// the child's error kind. A Sleep that is not a positive Go duration fails the run with kind
// flow.KindInvalidInput before any child starts.
//
// `flow cancel` of the parent while the children sleep: the parent does not handle cancellation,
// so it ends cancelled at once. Its end then reaches each child by policy:
//   - request_cancel: the child is asked to cancel (run.cancel_requested, reason
//     `parent run "<parent>" ended (cancelled)`); it does not handle cancellation either, so it
//     ends cancelled at once and its timer is dropped;
//   - abandon: the child is left alone; it sleeps on and completes with its input, which nobody
//     reads any more.
//
// `flow terminate` of the parent reaches the children the same way. When the parent completes,
// both children have already ended, so the policies change nothing.
func Parent(ctx *flow.Context, in ParentInput) (flow.Decision, error) {
	if in.Sleep == "" {
		in.Sleep = "30s"
	}
	if _, err := positiveDuration("sleep", in.Sleep, "30s"); err != nil {
		return ctx.Fail(err), nil
	}
	children := parentChildren(in.Sleep)
	outputs := make(map[string]json.RawMessage, len(children))
	for _, c := range children {
		r := ctx.Child(c.ID)
		if r == nil {
			continue
		}
		if r.Err != nil {
			return ctx.Fail(r.Err), nil
		}
		outputs[c.ID] = r.Output
	}
	if len(outputs) < len(children) {
		// Re-issuing the recorded batch keeps the run waiting for the children still running.
		return ctx.StartChildren(children...), nil
	}
	return ctx.Complete(outputs), nil
}

// Child sleeps in.Sleep on a durable timer, then completes with its input as recorded. It does
// not handle cancellation: a requested cancellation ends it cancelled at its next decision. A
// Sleep that is not a positive Go duration fails the run with kind flow.KindInvalidInput.
func Child(ctx *flow.Context, in ChildInput) (flow.Decision, error) {
	sleep, err := positiveDuration("sleep", in.Sleep, "30s")
	if err != nil {
		return ctx.Fail(err), nil
	}
	if !ctx.Fired("sleep") {
		return ctx.Sleep("sleep", sleep), nil
	}
	return ctx.Complete(ctx.RawInput()), nil
}
