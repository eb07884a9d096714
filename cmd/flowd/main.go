// Command flowd runs one Flow service as its own process, configured from the environment:
//
//	flowd scheduler   fire durable timers (any number of replicas; one leads)
//	flowd worker      run the example workflows (your own workers embed services/worker)
//
// Configuration: FLOW_NATS_URL (default nats://127.0.0.1:4222), FLOW_QUEUE, FLOW_STREAMS_REPLICAS
// and the other fields of worker.Config and scheduler.Config, prefixed FLOW_.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "flowd:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 2 || (os.Args[1] != "worker" && os.Args[1] != "scheduler") {
		return fmt.Errorf("usage: flowd worker|scheduler (configured by FLOW_* environment variables)")
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch os.Args[1] {
	case "scheduler":
		var cfg scheduler.Config
		if err := envconfig.Process("FLOW", &cfg); err != nil {
			return err
		}
		cfg.Logger = logger
		s, err := scheduler.New(cfg)
		if err != nil {
			return err
		}
		if err := s.Start(ctx); err != nil {
			return err
		}
		<-ctx.Done()
		return s.Stop()
	default:
		var cfg worker.Config
		if err := envconfig.Process("FLOW", &cfg); err != nil {
			return err
		}
		cfg.Logger = logger
		reg := flow.NewRegistry(&flow.RegistryOptions{BuildID: os.Getenv("FLOW_BUILD_ID"), Logger: logger})
		examples.Register(reg)
		w, err := worker.New(cfg, reg)
		if err != nil {
			return err
		}
		if err := w.Start(ctx); err != nil {
			return err
		}
		<-ctx.Done()
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return w.Stop(stopCtx)
	}
}
