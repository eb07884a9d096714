package flow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

// A child with a retry policy whose first run fails is started again as a new run after the
// backoff; the parent sees the child settle once, with the last run's result. A parent that
// cancels a child with WaitCancelled asks the child's run to cancel and goes on once it ended.
// docs/cancellation.md shows this example's output.
func ExampleWithChildRetry() {
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "ship", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if !strings.HasSuffix(ctx.RunID(), "=_2") {
			return ctx.Fail(errors.New("carrier unavailable")), nil // the first run fails
		}
		return ctx.Complete("shipped by " + ctx.RunID()), nil
	})
	flow.RegisterWorkflow(reg, "order", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		r := ctx.Child("ship")
		if r == nil {
			return ctx.StartChild("ship", "ship", nil,
				flow.WithChildRetry(flow.RetryPolicy{MaxAttempts: 3, InitialInterval: 10 * time.Second})), nil
		}
		return ctx.Complete(r.Output), nil
	})
	flow.RegisterWorkflow(reg, "track", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		return ctx.AwaitSignal("delivered", "delivered"), nil // until cancelled
	})
	flow.RegisterWorkflow(reg, "watch", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.Snapshot().Children["track"] == nil {
			return ctx.StartChild("track", "track", nil), nil
		}
		if r := ctx.Child("track"); r != nil {
			return ctx.Complete(string(r.Outcome)), nil
		}
		return ctx.CancelChild("track", flow.WaitCancelled), nil
	})

	env, err := flowtest.New(reg, nil)
	must(err)
	ctx := context.Background()
	order, err := env.Start(ctx, "order", nil, &flowtest.StartOptions{RunID: "order-1"})
	must(err)
	must(env.Advance(ctx, 10*time.Second)) // the backoff before the second run
	var shipped string
	must(env.Result(ctx, order, &shipped))
	fmt.Println(shipped)
	printTypes(env, order)

	watch, err := env.Start(ctx, "watch", nil, &flowtest.StartOptions{RunID: "watch-1"})
	must(err)
	var outcome string
	must(env.Result(ctx, watch, &outcome))
	fmt.Println("child", outcome)
	printTypes(env, watch)
	printTypes(env, "watch-1=track")
	// Output:
	// shipped by order-1=ship=_2
	// order-1: run.started child.scheduled child.retry_scheduled child.retry_fired child.settled run.completed
	// child cancelled
	// watch-1: run.started child.scheduled child.cancel_requested child.settled run.completed
	// watch-1=track: run.started run.cancel_requested run.cancelled
}

func printTypes(env *flowtest.Env, runID string) {
	hist, err := env.History(context.Background(), runID)
	must(err)
	types := make([]string, len(hist))
	for i, e := range hist {
		types[i] = string(e.Type())
	}
	fmt.Printf("%s: %s\n", runID, strings.Join(types, " "))
}
