package flow_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

// orderWithStage registers "order": it starts with a customer, upserts its stage once
// (guarded by ctx.Upserted), and completes. stage is what the upsert sets.
func orderWithStage(stage string) *flow.Registry {
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "order", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if !ctx.Upserted("stage-paid") {
			return ctx.UpsertAttributes("stage-paid", flow.Attrs{"stage": stage, "amount": 120}), nil
		}
		return ctx.Complete(nil), nil
	}, flow.WithSearchAttributes(flow.Keyword("customer"), flow.Keyword("stage"), flow.Int("amount")))
	return reg
}

// Search attributes: set at start, changed by an upsert decision, recorded in history and
// compared on replay. Code that now upserts another value cannot replay the history: the
// non-determinism error names the attribute.
func ExampleContext_UpsertAttributes() {
	ctx := context.Background()
	env, err := flowtest.New(orderWithStage("paid"), nil)
	if err != nil {
		log.Fatal(err)
	}
	runID, err := env.Start(ctx, "order", nil, &flowtest.StartOptions{RunID: "order-1", Attributes: flow.Attrs{"customer": "c-42"}})
	if err != nil {
		log.Fatal(err)
	}
	snap, _ := env.Snapshot(ctx, runID)
	for _, name := range []string{"amount", "customer", "stage"} {
		fmt.Printf("%s=%s (%s)\n", name, snap.Attributes[name], snap.Attributes[name].Type)
	}
	hist, _ := env.History(ctx, runID)
	for _, e := range hist {
		fmt.Printf("sequence=%d event=%s\n", e.Seq, e.Type())
	}

	err = flowtest.ReplayHistory(hist, orderWithStage("settled"))
	var nd *flow.NonDeterminismError
	fmt.Println(errors.As(err, &nd), nd.Kind, nd.ID, nd.Field, nd.Recorded, "->", nd.New)
	// Output:
	// amount=120 (int)
	// customer="c-42" (keyword)
	// stage="paid" (keyword)
	// sequence=1 event=run.started
	// sequence=2 event=attributes.upserted
	// sequence=3 event=run.completed
	// true upsert stage-paid attributes.stage keyword "paid" -> keyword "settled"
}

// A start may set only declared attributes, each with a value of its declared type.
func ExampleWithSearchAttributes() {
	env, err := flowtest.New(orderWithStage("paid"), nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = env.Start(context.Background(), "order", nil, &flowtest.StartOptions{Attributes: flow.Attrs{"amount": "lots"}})
	fmt.Println(err)
	// Output:
	// flow: invalid input: starting "order": search attribute "amount": flow: invalid search attribute value: got "lots"; an int attribute takes an integer, e.g. 42
}
