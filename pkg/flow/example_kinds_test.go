package flow_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func printHistory(env *flowtest.Env, runID string) {
	history, err := env.History(context.Background(), runID)
	must(err)
	for _, e := range history {
		fmt.Printf("  %d %s\n", e.Seq, e.Type())
	}
}

// A batch of steps is one decision: all members are scheduled by one event and run at once.
func ExampleContext_ScheduleSteps() {
	reg := flow.NewRegistry(nil)
	skus := []string{"sku-8842", "sku-1001", "sku-0007"}
	flow.RegisterWorkflow(reg, "reserve-all", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		var batch []flow.Step
		reserved := 0
		for _, sku := range skus {
			id := "reserve-" + sku
			if _, ok, err := flow.Output[string](ctx, id); err != nil {
				return nil, err
			} else if ok {
				reserved++
			}
			batch = append(batch, flow.Step{ID: id, Name: "reserveStock", Input: sku})
		}
		if reserved == len(skus) {
			return ctx.Complete(fmt.Sprintf("%d reserved", reserved)), nil
		}
		return ctx.ScheduleSteps(batch...), nil
	})
	flow.RegisterStep(reg, "reserveStock", func(ctx context.Context, sku string) (string, error) {
		// The warehouse deduplicates by this key, so a repeated attempt reserves once.
		return flow.IdempotencyKey(ctx, sku), nil
	})

	env, err := flowtest.New(reg, nil)
	must(err)
	ctx := context.Background()
	runID, err := env.Start(ctx, "reserve-all", nil, &flowtest.StartOptions{RunID: "order-2026-0001"})
	must(err)
	var summary string
	must(env.Result(ctx, runID, &summary))
	fmt.Println(summary)
	s, _ := env.Snapshot(ctx, runID)
	fmt.Println(string(s.Steps["reserve-sku-8842"].Output))
	printHistory(env, runID)
	// Output:
	// 3 reserved
	// "order-2026-0001:reserve-sku-8842:sku-8842"
	//   1 run.started
	//   2 step.scheduled
	//   3 step.completed
	//   4 step.completed
	//   5 step.completed
	//   6 run.completed
}

// A durable timer: the run holds no worker while it sleeps, and the timer fires when the clock
// (here the test's virtual clock) passes its deadline.
func ExampleContext_Sleep() {
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "reminder", func(ctx *flow.Context, who string) (flow.Decision, error) {
		if !ctx.Fired("one-day") {
			return ctx.Sleep("one-day", 24*time.Hour), nil
		}
		if ctx.StepOutput("remind") == nil {
			return ctx.ScheduleStep("remind", "sendReminder", who), nil
		}
		return ctx.Complete(ctx.Now().Format(time.RFC3339)), nil
	})
	flow.RegisterStep(reg, "sendReminder", func(ctx context.Context, who string) (string, error) { return "sent to " + who, nil })

	env, err := flowtest.New(reg, nil)
	must(err)
	ctx := context.Background()
	runID, err := env.Start(ctx, "reminder", "ann", nil)
	must(err)
	s, _ := env.Snapshot(ctx, runID)
	fmt.Println(s.Status, s.Waits["one-day"].Deadline.Format(time.RFC3339))

	must(env.Advance(ctx, 24*time.Hour))
	var finished string
	must(env.Result(ctx, runID, &finished))
	fmt.Println("completed at", finished)
	// Output:
	// suspended 2026-01-02T00:00:00Z
	// completed at 2026-01-02T00:00:00Z
}

// A signal carries data into a waiting run. A signal sent before the run waits for it is kept
// until a wait consumes it.
func ExampleContext_AwaitSignal() {
	type Approval struct {
		By       string `json:"by"`
		Approved bool   `json:"approved"`
	}
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "expense", func(ctx *flow.Context, amount int) (flow.Decision, error) {
		a, ok, err := flow.SignalValue[Approval](ctx, "manager")
		if err != nil {
			return nil, err
		}
		if !ok {
			return ctx.AwaitSignal("manager", "approval"), nil
		}
		if !a.Approved {
			return ctx.Fail(flow.NewError("rejected", "rejected by "+a.By)), nil
		}
		return ctx.Complete(fmt.Sprintf("%d approved by %s", amount, a.By)), nil
	})

	env, err := flowtest.New(reg, nil)
	must(err)
	ctx := context.Background()
	runID, err := env.Start(ctx, "expense", 120, nil)
	must(err)
	s, _ := env.Snapshot(ctx, runID)
	fmt.Println(s.Status)
	must(env.Signal(ctx, runID, "approval", Approval{By: "ann", Approved: true}))
	var out string
	must(env.Result(ctx, runID, &out))
	fmt.Println(out)
	// Output:
	// suspended
	// 120 approved by ann
}

// A hook is a callback endpoint: its token, derived from the run's random seed, routes one
// delivery from an external system to the run.
func ExampleContext_CreateHook() {
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "payment", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		receipt, ok, err := flow.HookValue[map[string]string](ctx, "psp-callback")
		if err != nil {
			return nil, err
		}
		if ok {
			return ctx.Complete(receipt["status"]), nil
		}
		return ctx.CreateHook("psp-callback", map[string]string{"provider": "acme-pay"}), nil
	})

	env, err := flowtest.New(reg, nil)
	must(err)
	ctx := context.Background()
	runID, err := env.Start(ctx, "payment", nil, nil)
	must(err)
	s, _ := env.Snapshot(ctx, runID)
	token := s.Hooks["psp-callback"].Token
	fmt.Println(s.Status, len(token))
	must(env.DeliverHook(ctx, token, map[string]string{"status": "captured"}))
	var status string
	must(env.Result(ctx, runID, &status))
	fmt.Println(status)
	// Output:
	// suspended 32
	// captured
}

// A child workflow runs as its own run, "<parent>=<child ID>"; the parent waits for it without
// holding a worker and reads how it ended.
func ExampleContext_StartChild() {
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "order", func(ctx *flow.Context, order string) (flow.Decision, error) {
		charge, ok, err := flow.ChildOutput[string](ctx, "payment")
		if err != nil {
			return nil, err
		}
		if ok {
			return ctx.Complete(order + " paid with " + charge), nil
		}
		return ctx.StartChild("payment", "charge", 42), nil
	})
	flow.RegisterWorkflow(reg, "charge", func(ctx *flow.Context, amount int) (flow.Decision, error) {
		if out := ctx.StepOutput("charge-card"); out != nil {
			return ctx.Complete(out), nil
		}
		return ctx.ScheduleStep("charge-card", "chargeCard", amount), nil
	})
	flow.RegisterStep(reg, "chargeCard", func(ctx context.Context, amount int) (string, error) {
		return fmt.Sprintf("ch_%d", amount), nil
	})

	env, err := flowtest.New(reg, nil)
	must(err)
	ctx := context.Background()
	runID, err := env.Start(ctx, "order", "order-9", &flowtest.StartOptions{RunID: "order-9"})
	must(err)
	var out string
	must(env.Result(ctx, runID, &out))
	fmt.Println(out)
	fmt.Println(env.Runs())
	printHistory(env, runID)
	// Output:
	// order-9 paid with ch_42
	// [order-9 order-9=payment]
	//   1 run.started
	//   2 child.scheduled
	//   3 child.settled
	//   4 run.completed
}
