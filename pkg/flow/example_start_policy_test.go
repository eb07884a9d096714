package flow_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

// Debounce: saves of one document within a quiet period of 30 seconds become one indexing
// run, started once the saves stop, with the latest revision. (With a Client, the same
// options are flow.StartOptions{Debounce: &flow.Debounce{...}}.)
func Example_debounce() {
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "index", func(ctx *flow.Context, rev int) (flow.Decision, error) {
		return ctx.Complete(fmt.Sprintf("indexed revision %d", rev)), nil
	})
	env, err := flowtest.New(reg, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var runID string
	for rev := 1; rev <= 3; rev++ {
		id, err := env.Start(ctx, "index", rev, &flowtest.StartOptions{Debounce: &flow.Debounce{Key: "doc-9", Period: 30 * time.Second}})
		if err != nil {
			log.Fatal(err)
		}
		runID = id
		if err := env.Advance(ctx, 10*time.Second); err != nil { // the next save comes before the period ends
			log.Fatal(err)
		}
	}
	if err := env.Advance(ctx, 30*time.Second); err != nil {
		log.Fatal(err)
	}
	var out string
	if err := env.Result(ctx, runID, &out); err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)
	history, _ := env.History(ctx, runID)
	for _, e := range history {
		fmt.Println(e.Type())
	}
	// Output:
	// indexed revision 3
	// run.started
	// run.debounced
	// run.debounced
	// run.delay_fired
	// run.completed
}
