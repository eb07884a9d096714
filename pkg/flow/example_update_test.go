package flow_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

// A cart takes "add" updates while it waits for checkout: the validator rejects a quantity
// that is not positive, the handler completes an accepted update at once with the cart's new
// size. Every acceptance, rejection and result is in the run's history.
func ExampleRegisterUpdate() {
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "cart", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.Signal("checkout") != nil {
			return ctx.Complete(len(ctx.Updates())), nil
		}
		return ctx.AwaitSignal("checkout", "checkout"), nil
	})
	flow.RegisterUpdate(reg, "cart", "add", flow.UpdateHandler[int]{
		Validate: func(_ *flow.Context, _ *flow.Update, qty int) error {
			if qty <= 0 {
				return flow.NewError("invalid_quantity", "add at least one")
			}
			return nil
		},
		Complete: func(ctx *flow.Context, _ *flow.Update, qty int) (any, error) {
			items := 0
			for _, u := range ctx.Updates() {
				if u.Status != flow.UpdateRejected {
					var n int
					_ = flow.DecodeUpdate(u, &n)
					items += n
				}
			}
			return items, nil
		},
	})

	env, err := flowtest.New(reg, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	runID, err := env.Start(ctx, "cart", nil, &flowtest.StartOptions{RunID: "cart-7"})
	if err != nil {
		log.Fatal(err)
	}
	out, err := env.Update(ctx, runID, "add", 2, "add-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("add 2: %s\n", out.Result)
	_, err = env.Update(ctx, runID, "add", 0, "add-2")
	fmt.Println("add 0 rejected:", errors.Is(err, flow.ErrUpdateRejected))
	out, _ = env.Update(ctx, runID, "add", 2, "add-1") // a retry: the same outcome, recorded once
	fmt.Printf("add 2 again: %s\n", out.Result)
	history, _ := env.History(ctx, runID)
	for _, e := range history {
		fmt.Printf("sequence=%d event=%s\n", e.Seq, e.Type())
	}
	// Output:
	// add 2: 2
	// add 0 rejected: true
	// add 2 again: 2
	// sequence=1 event=run.started
	// sequence=2 event=signal.awaited
	// sequence=3 event=update.received
	// sequence=4 event=update.accepted
	// sequence=5 event=update.completed
	// sequence=6 event=update.received
	// sequence=7 event=update.rejected
}
