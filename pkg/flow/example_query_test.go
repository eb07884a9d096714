package flow_test

import (
	"context"
	"fmt"
	"log"

	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

// A workflow that records an order number once with a side effect, waits for approval, and
// answers the query "stage" from inside its code. Querying appends nothing.
func ExampleHandleQuery() {
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "approve", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		number, d, err := flow.SideEffectValue(ctx, "number", func() int { return 8842 })
		if d != nil || err != nil {
			return d, err
		}
		stage := "waiting for approval"
		if ctx.Signal("approval") != nil {
			stage = "approved"
		}
		flow.HandleQuery(ctx, "stage", func(struct{}) (string, error) {
			return fmt.Sprintf("order %d: %s", number, stage), nil
		})
		if stage != "approved" {
			return ctx.AwaitSignal("approval", "approve"), nil
		}
		return ctx.Complete(number), nil
	})
	env, err := flowtest.New(reg, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	runID, err := env.Start(ctx, "approve", nil, &flowtest.StartOptions{RunID: "order-1"})
	if err != nil {
		log.Fatal(err)
	}
	var stage string
	if err := env.Query(ctx, runID, "stage", nil, &stage); err != nil {
		log.Fatal(err)
	}
	fmt.Println(stage)
	if err := env.Signal(ctx, runID, "approve", true); err != nil {
		log.Fatal(err)
	}
	if err := env.Query(ctx, runID, "stage", nil, &stage); err != nil {
		log.Fatal(err)
	}
	fmt.Println(stage)
	history, _ := env.History(ctx, runID)
	for _, e := range history {
		fmt.Printf("sequence=%d event=%s\n", e.Seq, e.Type())
	}
	// Output:
	// order 8842: waiting for approval
	// order 8842: approved
	// sequence=1 event=run.started
	// sequence=2 event=side_effect.recorded
	// sequence=3 event=signal.awaited
	// sequence=4 event=signal.received
	// sequence=5 event=run.completed
}
