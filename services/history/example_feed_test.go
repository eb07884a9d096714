package history_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/worker"
)

// The example subscriber of docs/events.md: it follows every run of the workflow "greet" on the
// public event feed, and prints each event's ce-id and ce-type as it arrives.
func Example_feed() {
	if err := followGreetings(context.Background()); err != nil {
		fmt.Println("error:", err)
	}
	// Output:
	// greet-1:1 dev.flow.run.started
	// greet-1:2 dev.flow.step.scheduled
	// greet-1:3 dev.flow.step.completed
	// greet-1:4 dev.flow.step.scheduled
	// greet-1:5 dev.flow.step.completed
	// greet-1:6 dev.flow.run.completed
	// output: "Hello, Ada!"
}

// greet is a two-step workflow: compose a greeting, then send it.
func greet(ctx *flow.Context, name string) (flow.Decision, error) {
	greeting, ok, err := flow.Output[string](ctx, "compose")
	if err != nil || !ok {
		return ctx.ScheduleStep("compose", "compose", name), err
	}
	sent, ok, err := flow.Output[string](ctx, "send")
	if err != nil || !ok {
		return ctx.ScheduleStep("send", "send", greeting), err
	}
	return ctx.Complete(sent), nil
}

func followGreetings(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)

	// Flow: an embedded NATS server with JetStream and Flow's streams, the history service
	// (which publishes the feed), and a worker that runs "greet". Deferred calls stop them in
	// reverse order.
	dir, err := os.MkdirTemp("", "flow-feed-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := natsserver.Start(natsserver.Config{Dir: dir, Port: -1, Logger: quiet})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		return err
	}
	h, err := history.New(history.Config{Conn: nc, HTTPAddr: "off", Logger: quiet})
	if err != nil {
		return err
	}
	if err := h.Start(ctx); err != nil {
		return err
	}
	defer h.Stop()
	in, err := ingress.New(ingress.Config{Conn: nc, HTTPAddr: "off", Logger: quiet})
	if err != nil {
		return err
	}
	if err := in.Start(ctx); err != nil {
		return err
	}
	defer in.Stop()
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "greet", greet)
	flow.RegisterStep(reg, "compose", func(_ context.Context, name string) (string, error) {
		return "Hello, " + name, nil
	})
	flow.RegisterStep(reg, "send", func(_ context.Context, greeting string) (string, error) {
		return greeting + "!", nil // in production: an email, a chat message, ...
	})
	w, err := worker.New(worker.Config{Conn: nc, Logger: quiet}, reg)
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Stop(context.Background())

	// The subscriber: its own connection, nats.go and the CloudEvents SDK, nothing of Flow. It
	// subscribes before the run starts, because the feed keeps nothing for subscribers that are
	// away; Flush returns once the server has the subscription.
	sc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer sc.Close()
	sub, err := sc.SubscribeSync("flow.events.greet.>")
	if err != nil {
		return err
	}
	if err := sc.Flush(); err != nil {
		return err
	}

	// Start one run, with a fixed ID, and wait for its result.
	client, err := flow.NewClient(ctx, nc, nil)
	if err != nil {
		return err
	}
	runID, err := client.Start(ctx, "greet", "Ada", &flow.StartOptions{RunID: "greet-1"})
	if err != nil {
		return err
	}
	if err := client.Result(ctx, runID, nil); err != nil {
		return err
	}

	// Read the run's events from the feed, in order, until the one that ends the run. Result
	// returns once run.completed is committed; the feed may publish it a little later.
	for {
		msg, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			return err
		}
		e, err := binding.ToEvent(ctx, cenats.NewMessage(msg))
		if err != nil {
			return err
		}
		fmt.Println(e.ID(), e.Type())
		if e.Type() == history.FeedTypePrefix+"run.completed" {
			// The data is the event's payload, as in schemas/events/run.completed.json.
			var done struct {
				Output string `json:"output"`
			}
			if err := e.DataAs(&done); err != nil {
				return err
			}
			fmt.Printf("output: %q\n", done.Output)
			return nil
		}
	}
}
