// Command flowd runs one Flow service as its own process, configured from the environment:
//
//	flowd history [--rebuild]   the history service: the consequences of every commit, the runs
//	                            index, queries over NATS and HTTP (any number of replicas)
//	flowd ingress               inputs from outside: starts, signals, hook callbacks, cancels over
//	                            NATS and HTTP (any number of replicas)
//	flowd scheduler             fire durable timers (any number of replicas; one leads)
//	flowd worker                run the example workflows (your own workers embed services/worker)
//	flowd health URL            exit 0 if GET URL answers 2xx within 2s, else 1 saying why (the
//	                            HEALTHCHECK of the FROM-scratch images, which have no shell)
//
// Configuration: the fields of history.Config, worker.Config and scheduler.Config, prefixed
// FLOW_: FLOW_QUEUE, FLOW_STREAMS_REPLICAS, FLOW_HISTORY_HTTP_ADDR, ... The connection to NATS is
// FLOW_NATS_URL (servers, comma-separated), FLOW_NATS_CREDS, FLOW_NATS_NKEY, FLOW_NATS_USER and
// FLOW_NATS_PASSWORD, FLOW_NATS_TOKEN, FLOW_NATS_TLS_CA, FLOW_NATS_TLS_CERT, FLOW_NATS_TLS_KEY,
// FLOW_NATS_TLS_FIRST and FLOW_NATS_CONTEXT (a nats CLI context); what they leave unset comes from
// the nats CLI's NATS_URL, NATS_CREDS, ..., then its selected context, then
// nats://127.0.0.1:4222 (see docs/operations.md, "Connecting to NATS").
//
// Every service serves GET /healthz, /readyz and /metrics: the history on
// FLOW_HISTORY_HTTP_ADDR (127.0.0.1:8420), the ingress on FLOW_INGRESS_HTTP_ADDR (127.0.0.1:8421),
// the scheduler on FLOW_SCHEDULER_HTTP_ADDR (127.0.0.1:8422), the worker on FLOW_WORKER_HTTP_ADDR
// (127.0.0.1:8423). Traces and metrics go over OTLP when the standard OTEL_* variables ask for
// it, such as OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318; the service is named
// flow-history, flow-ingress, flow-scheduler or flow-worker unless OTEL_SERVICE_NAME says
// otherwise (see docs/observability.md). Logs are JSON on stderr.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/telemetry"
	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// version is the release this binary was built as, set when linking with
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/flowd
//
// Empty means the module version from the build information, if any. It is the service.version
// of the telemetry resource.
var version string

const usage = "usage: flowd history [--rebuild] | flowd ingress | flowd scheduler | flowd worker | flowd health URL (configured by FLOW_* environment variables)"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "flowd:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%s", usage)
	}
	role, flags := args[0], args[1:]
	if role == "health" {
		return health(context.Background(), flags)
	}
	rebuild := false
	for _, f := range flags {
		if role != "history" || f != "--rebuild" {
			return fmt.Errorf("unknown argument %q; %s", f, usage)
		}
		rebuild = true
	}
	switch role {
	case "history", "ingress", "scheduler", "worker":
	default:
		return fmt.Errorf("unknown service %q; %s", role, usage)
	}
	logger := slog.New(tracing.NewHandler(slog.NewJSONHandler(os.Stderr, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "flow-" + role, Version: buildVersion(), Logger: logger})
	if err != nil {
		return err
	}
	defer func() {
		// Flush the spans and metrics the exporters hold, within a bound.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			logger.Warn("flushing telemetry", slog.String("error", err.Error()))
		}
	}()
	switch role {
	case "history":
		var cfg history.Config
		if err := envconfig.Process("FLOW", &cfg); err != nil {
			return err
		}
		cfg.Logger, cfg.Rebuild = logger, cfg.Rebuild || rebuild
		if err := provisionStreams(ctx, cfg.NATS, cfg.Streams, or(cfg.HTTPAddr, history.DefaultHTTPAddr), logger); err != nil {
			return err
		}
		h, err := history.New(cfg)
		return serve(ctx, h, err)
	case "ingress":
		var cfg ingress.Config
		if err := envconfig.Process("FLOW", &cfg); err != nil {
			return err
		}
		cfg.Logger = logger
		if err := awaitStreams(ctx, cfg.NATS, "ingress", or(cfg.HTTPAddr, ingress.DefaultHTTPAddr), logger); err != nil {
			return err
		}
		in, err := ingress.New(cfg)
		return serve(ctx, in, err)
	case "scheduler":
		var cfg scheduler.Config
		if err := envconfig.Process("FLOW", &cfg); err != nil {
			return err
		}
		cfg.Logger = logger
		if err := awaitStreams(ctx, cfg.NATS, "scheduler", or(cfg.HTTPAddr, scheduler.DefaultHTTPAddr), logger); err != nil {
			return err
		}
		s, err := scheduler.New(cfg)
		return serve(ctx, s, err)
	case "worker":
		var cfg worker.Config
		if err := envconfig.Process("FLOW", &cfg); err != nil {
			return err
		}
		cfg.Logger = logger
		reg := flow.NewRegistry(&flow.RegistryOptions{BuildID: os.Getenv("FLOW_BUILD_ID"), Logger: logger})
		// FLOW_INGRESS_PUBLIC_URL: the base of the callback URLs the webhook example announces.
		examples.RegisterWith(reg, examples.Options{HookBaseURL: os.Getenv("FLOW_INGRESS_PUBLIC_URL"), Logger: logger})
		if err := awaitStreams(ctx, cfg.NATS, "worker", or(cfg.HTTPAddr, worker.DefaultHTTPAddr), logger); err != nil {
			return err
		}
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
	return fmt.Errorf("unknown service %q; %s", role, usage)
}

// service is a service flowd runs until it is told to stop.
type service interface {
	Start(ctx context.Context) error
	Stop() error
}

// serve starts s, which its constructor returned with err, runs it until ctx ends and stops it.
func serve(ctx context.Context, s service, err error) error {
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return s.Stop()
}

// or returns v, or def when v is empty.
func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// buildVersion is version, else the module version from the build information, else "".
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return ""
}
