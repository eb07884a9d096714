package flowtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

// Testing a workflow in memory: the step is mocked (its first attempt fails, the retry
// succeeds), the retry's backoff passes on the virtual clock, and the test reads the result,
// the number of attempts and the history. In a test, report errors with t.Fatal instead.
func ExampleEnv_OnStep() {
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "invoice", func(ctx *flow.Context, customer string) (flow.Decision, error) {
		id, ok, err := flow.Output[string](ctx, "send")
		if err != nil || !ok {
			return ctx.ScheduleStep("send", "sendInvoice", customer,
				flow.WithRetry(flow.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Minute})), err
		}
		return ctx.Complete("sent " + id), nil
	})
	flow.RegisterStep(reg, "sendInvoice", func(ctx context.Context, customer string) (string, error) {
		return "", errors.New("the real mail service is not called in tests")
	})

	env, err := flowtest.New(reg, nil)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	env.OnStep("sendInvoice", func(_ context.Context, in json.RawMessage) (any, error) {
		if env.StepCalls("sendInvoice") == 1 {
			return nil, flow.NewError("unavailable", "mail service down")
		}
		return "inv-" + string(in[1:len(in)-1]), nil
	})
	ctx := context.Background()
	runID, err := env.Start(ctx, "invoice", "c-42", &flowtest.StartOptions{RunID: "invoice-1"})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	if err := env.Advance(ctx, time.Minute); err != nil { // the retry's backoff
		fmt.Println("error:", err)
		return
	}
	var out string
	if err := env.Result(ctx, runID, &out); err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(out, "after", env.StepCalls("sendInvoice"), "attempts")
	history, _ := env.History(ctx, runID)
	for _, e := range history {
		fmt.Println(e.Seq, e.Type())
	}
	// Output:
	// sent inv-c-42 after 2 attempts
	// 1 run.started
	// 2 step.scheduled
	// 3 step.failed
	// 4 step.retry_scheduled
	// 5 step.retry_fired
	// 6 step.completed
	// 7 run.completed
}
