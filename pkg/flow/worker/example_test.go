package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flow/worker"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
)

// A worker serving a two-step workflow, and a client running it. Flow itself (the embedded NATS
// server and the ingress and history services) stands in here for `flow dev`; a program only
// needs the registry, the worker and the client.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, stopFlow, err := startFlow(ctx)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer stopFlow()

	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: slog.New(slog.DiscardHandler)})
	flow.RegisterWorkflow(reg, "greet", func(ctx *flow.Context, name string) (flow.Decision, error) {
		greeting, ok, err := flow.Output[string](ctx, "compose")
		if err != nil || !ok {
			return ctx.ScheduleStep("compose", "compose", name), err
		}
		return ctx.Complete(greeting + "!"), nil
	})
	flow.RegisterStep(reg, "compose", func(_ context.Context, name string) (string, error) {
		return "Hello, " + name, nil
	})

	// The worker: Run serves until its context ends, then stops.
	w, err := worker.New(reg, &worker.Options{URL: url, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stopWorker(); <-done }()

	client, err := flow.Dial(ctx, url, nil)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer client.Close()
	// Start refuses a definition no live worker serves: wait for the worker to register.
	var runID string
	for {
		runID, err = client.Start(ctx, "greet", "Ada", &flow.StartOptions{RunID: "greet-1"})
		if !errors.Is(err, flow.ErrNoWorker) || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	var out string
	if err := client.Result(ctx, runID, &out); err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(out)
	// Output: Hello, Ada!
}

// startFlow starts what `flow dev` runs, minus its worker: an embedded NATS server with
// JetStream, the history service and the ingress. It returns the server's URL and a function
// that stops them.
func startFlow(ctx context.Context) (string, func(), error) {
	quiet := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "flow-worker-example-")
	if err != nil {
		return "", nil, err
	}
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	stops = append(stops, func() { os.RemoveAll(dir) })
	srv, err := natsserver.Start(natsserver.Config{Dir: dir, Port: -1, Logger: quiet})
	if err != nil {
		stop()
		return "", nil, err
	}
	stops = append(stops, srv.Shutdown)
	// start starts a service New returned (err its error) and stops it with the rest.
	start := func(svc interface {
		Start(context.Context) error
		Stop() error
	}, err error) error {
		if err == nil {
			err = svc.Start(ctx)
		}
		if err == nil {
			stops = append(stops, func() { svc.Stop() })
		}
		return err
	}
	nats := natsconn.Config{URL: srv.ClientURL()}
	err = start(history.New(history.Config{NATS: nats, HTTPAddr: "off", Logger: quiet}))
	if err == nil {
		err = start(ingress.New(ingress.Config{NATS: nats, HTTPAddr: "off", Logger: quiet}))
	}
	if err != nil {
		stop()
		return "", nil, err
	}
	return srv.ClientURL(), stop, nil
}
