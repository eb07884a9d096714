package examples

import (
	"context"
	"fmt"
	"time"

	"github.com/flowrun/flow/pkg/flow"
)

// InvoiceInput is the input of the invoice workflow. FixedAt is the attempt from which the
// simulated bug is fixed (default 4): the first attempts fail, the retry policy's three run
// out, and the run pauses until `flow unpause RUN` gives the step its fourth attempt.
type InvoiceInput struct {
	Customer string `json:"customer"`
	FixedAt  int    `json:"fixed_at"`
}

// Invoice computes and sends an invoice. Its step's retry policy pauses the run when the step
// exhausts its attempts, instead of failing it (flow.ExhaustionPauseRun): fix the bug, deploy, and
// unpause the run; see docs/pause.md.
func Invoice(ctx *flow.Context, in InvoiceInput) (flow.Decision, error) {
	if out := ctx.StepOutput("compute-tax"); out != nil {
		return ctx.Complete(out), nil
	}
	return ctx.ScheduleStep("compute-tax", "computeTax", in,
		flow.WithRetry(flow.RetryPolicy{MaxAttempts: 3, InitialInterval: 200 * time.Millisecond, OnExhaustion: flow.ExhaustionPauseRun})), nil
}

// ComputeTax fails before attempt in.FixedAt, as a step with a bug would until it is fixed.
func ComputeTax(ctx context.Context, in InvoiceInput) (map[string]any, error) {
	fixed := in.FixedAt
	if fixed == 0 {
		fixed = 4
	}
	info, _ := flow.StepInfoFrom(ctx)
	if info.Attempt < fixed {
		return nil, flow.NewError("tax_table", fmt.Sprintf("no tax rate for region %q (a bug fixed from attempt %d)", "EU-unknown", fixed))
	}
	return map[string]any{"customer": in.Customer, "tax": 19, "attempt": info.Attempt}, nil
}
