package flow_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

// Payment is the input of the charge step in the WithRetry example.
type Payment struct {
	Card   string  `json:"card"`
	Amount float64 `json:"amount"`
}

// A step's retry policy is an option of ScheduleStep. The ScheduleStep call below is the
// README's ("Writing a step"), so that the README's snippet keeps compiling: keep them the same.
// A retryable error ("gateway_timeout") is retried after the policy's backoff; a kind the policy
// lists as non-retryable ("card_declined") fails the step, and so the run, at once.
func ExampleWithRetry() {
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "pay", func(ctx *flow.Context, in Payment) (flow.Decision, error) {
		if charge, ok, err := flow.Output[string](ctx, "charge"); err != nil || ok {
			return ctx.Complete(charge), err
		}
		return ctx.ScheduleStep("charge", "chargePayment", in, flow.WithRetry(flow.RetryPolicy{
			MaxAttempts: 5, InitialInterval: time.Second, NonRetryable: []string{"card_declined"},
		})), nil
	})
	flow.RegisterStep(reg, "chargePayment", func(ctx context.Context, in Payment) (string, error) {
		info, _ := flow.StepInfoFrom(ctx)
		switch {
		case in.Card == "declined":
			return "", flow.NewError("card_declined", "the bank declined the card")
		case info.Attempt == 1:
			return "", flow.NewError("gateway_timeout", "the payment gateway did not answer in time")
		}
		return fmt.Sprintf("charged %.2f on attempt %d", in.Amount, info.Attempt), nil
	})

	env, err := flowtest.New(reg, nil)
	must(err)
	ctx := context.Background()
	ok, err := env.Start(ctx, "pay", Payment{Card: "visa", Amount: 42}, &flowtest.StartOptions{RunID: "pay-1"})
	must(err)
	must(env.Advance(ctx, time.Second)) // the backoff before attempt 2
	var charge string
	must(env.Result(ctx, ok, &charge))
	fmt.Println(charge)

	declined, err := env.Start(ctx, "pay", Payment{Card: "declined", Amount: 42}, &flowtest.StartOptions{RunID: "pay-2"})
	must(err)
	var runErr *flow.RunError
	if errors.As(env.Result(ctx, declined, nil), &runErr) {
		snapshot, err := env.Snapshot(ctx, declined)
		must(err)
		fmt.Println(runErr.Status, runErr.Kind, "after attempt", snapshot.Steps["charge"].Attempt)
	}
	// Output:
	// charged 42.00 on attempt 2
	// failed card_declined after attempt 1
}
