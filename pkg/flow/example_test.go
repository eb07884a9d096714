package flow_test

import (
	"context"
	"fmt"
	"log"

	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

type Pair struct {
	Pair string `json:"pair"`
}

// The seed's example: read the exchange rate in step "read-rate", then complete with its output.
// The rate is read in a step, never in the decision, so every replay sees the same value.
func Example() {
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "convert", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if rate := ctx.StepOutput("read-rate"); rate != nil {
			return ctx.Complete(rate), nil
		}
		return ctx.ScheduleStep("read-rate", "readExchangeRate", Pair{Pair: "CNY/USD"}), nil
	})
	flow.RegisterStep(reg, "readExchangeRate", func(ctx context.Context, in Pair) (float64, error) {
		return 0.1382, nil // in production: an HTTP call to a rates service
	})

	env, err := flowtest.New(reg, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	runID, err := env.Start(ctx, "convert", nil, &flowtest.StartOptions{RunID: "order-2026-0001"})
	if err != nil {
		log.Fatal(err)
	}
	var rate float64
	if err := env.Result(ctx, runID, &rate); err != nil {
		log.Fatal(err)
	}
	snapshot, _ := env.Snapshot(ctx, runID)
	fmt.Printf("status=%s rate=%v\n", snapshot.Status, rate)
	history, _ := env.History(ctx, runID)
	for _, e := range history {
		fmt.Printf("sequence=%d event=%s\n", e.Seq, e.Type())
	}
	// Output:
	// status=completed rate=0.1382
	// sequence=1 event=run.started
	// sequence=2 event=step.scheduled
	// sequence=3 event=step.completed
	// sequence=4 event=run.completed
}
