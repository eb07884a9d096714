package examples

import (
	"encoding/json"

	"github.com/flowrun/flow/pkg/flow"
)

// ApprovalSignal is the name of the signal the approval workflow waits for.
const ApprovalSignal = "approve"

// The identities the approval workflow records: its deadline timer and its signal wait.
const (
	approvalDeadline = "deadline"
	approvalWait     = "approval"
)

// ApprovalInput is the input of the approval workflow.
type ApprovalInput struct {
	// Who approves; the output names them. Defaults to "ann".
	Who string `json:"who"`
	// Timeout is how long to wait for the approval, as a Go duration. Defaults to "1m".
	Timeout string `json:"timeout"`
}

// ApprovalResult is the output of the approval workflow: {"approved": true, "by": Who,
// "payload": <the signal's payload>} or {"approved": false, "timed_out": true}.
type ApprovalResult struct {
	Approved bool            `json:"approved"`
	By       string          `json:"by,omitempty"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	TimedOut bool            `json:"timed_out,omitempty"`
}

// Approval waits up to Timeout for the signal "approve" (ApprovalSignal), holding no worker:
//
//	flow signal RUN approve --payload '{"note":"ok"}'
//
// It races a durable timer against a signal wait, since a signal wait has no deadline of its
// own: its first decision records the timer "deadline", its second the signal wait "approval",
// and from then on it waits on both. If the signal is recorded first, the run completes approved
// with the signal's payload; if the timer fires first, the run completes (it does not fail) with
// timed_out, and a later signal is refused because the run ended. A signal sent before the run
// waits for it is kept and approves the run at once. A Timeout that is not a positive Go
// duration fails the run with kind flow.KindInvalidInput.
func Approval(ctx *flow.Context, in ApprovalInput) (flow.Decision, error) {
	if in.Who == "" {
		in.Who = "ann"
	}
	timeout, err := positiveDuration("timeout", in.Timeout, "1m")
	if err != nil {
		return ctx.Fail(err), nil
	}
	// The signal is checked first: when both are recorded before this decision, the approval
	// wins, and it does so on every replay of the same history.
	if payload := ctx.Signal(approvalWait); payload != nil {
		return ctx.Complete(ApprovalResult{Approved: true, By: in.Who, Payload: payload}), nil
	}
	if ctx.Fired(approvalDeadline) {
		return ctx.Complete(ApprovalResult{TimedOut: true}), nil
	}
	if _, recorded := ctx.Snapshot().Waits[approvalDeadline]; !recorded {
		return ctx.Sleep(approvalDeadline, timeout), nil
	}
	return ctx.AwaitSignal(approvalWait, ApprovalSignal), nil
}
