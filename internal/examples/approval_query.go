package examples

import (
	"time"

	"github.com/flowrun/flow/pkg/flow"
)

// ApprovalStatus is the answer of the approval workflow's "status" query.
type ApprovalStatus struct {
	// Who is the approver the run waits for.
	Who string `json:"who"`
	// Waiting is set while neither the signal nor the deadline is recorded.
	Waiting bool `json:"waiting"`
	// Deadline is when the run times out, once its timer is recorded.
	Deadline time.Time `json:"deadline,omitzero"`
	Approved bool      `json:"approved,omitempty"`
	TimedOut bool      `json:"timed_out,omitempty"`
}

// ApprovalStatusQuery answers the approval workflow's "status" query (see flow.RegisterQuery)
// from the run's snapshot: whom it waits for, until when, and how it ended.
func ApprovalStatusQuery(ctx *flow.Context, _ struct{}) (ApprovalStatus, error) {
	var in ApprovalInput
	if err := ctx.Input(&in); err != nil {
		return ApprovalStatus{}, err
	}
	if in.Who == "" {
		in.Who = "ann"
	}
	st := ApprovalStatus{Who: in.Who, Approved: ctx.Signal(approvalWait) != nil}
	st.TimedOut = !st.Approved && ctx.Fired(approvalDeadline)
	st.Waiting = !st.Approved && !st.TimedOut
	if w, ok := ctx.Snapshot().Waits[approvalDeadline]; ok {
		st.Deadline = w.Deadline
	}
	return st, nil
}
