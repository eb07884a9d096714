package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	probes "github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/streams"
)

// provisionInterval is how often a service that waits for Flow's streams checks again.
const provisionInterval = 3 * time.Second

// awaitStreams returns once Flow's streams and buckets exist on the server cfg reaches, logging
// what is missing while it waits. The ingress, scheduler and worker call it before they start:
// in Flow's deployments only the history service's NATS user may create the streams
// (internal/natsperm), so the others wait for it instead of failing when they start first.
func awaitStreams(ctx context.Context, cfg natsconn.Config, role, httpAddr string, logger *slog.Logger) error {
	waiting := &probe{}
	waiting.set(errors.New("waiting for the history service to create Flow's streams"))
	defer waiting.serve(httpAddr, logger)()
	nc, err := cfg.Dial("flowd " + role + " (awaiting Flow's streams)")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	err = streams.AwaitProvisioned(ctx, js, provisionInterval, func(missing []string, err error) {
		if err != nil {
			waiting.set(fmt.Errorf("waiting for JetStream: %w", err))
			logger.WarnContext(ctx, "waiting for JetStream to answer before starting", slog.String("service", role), slog.String("error", err.Error()))
			return
		}
		waiting.set(fmt.Errorf("waiting for the history service to create %s", strings.Join(missing, ", ")))
		logger.WarnContext(ctx, "waiting for the history service to create Flow's streams before starting; start `flowd history` if it is not running",
			slog.String("service", role), slog.String("missing", strings.Join(missing, ",")))
	})
	if err != nil {
		return fmt.Errorf("waiting for Flow's streams: %w", err)
	}
	return nil
}

// provisionStreams creates or updates Flow's streams and buckets for the history service, trying
// again while JetStream cannot do it yet: a cluster that is still forming (no meta leader, too
// few peers for the replicas asked) answers with errors or not at all for a while, and a
// service that exited then would leave compose's depends_on and Kubernetes' back-off to bring
// it back late.
func provisionStreams(ctx context.Context, cfg natsconn.Config, sc streams.Config, httpAddr string, logger *slog.Logger) error {
	waiting := &probe{}
	waiting.set(errors.New("creating Flow's streams"))
	defer waiting.serve(httpAddr, logger)()
	nc, err := cfg.Dial("flowd history (provisioning Flow's streams)")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := streams.Ensure(ectx, js, sc)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("provisioning Flow's streams: %w", ctx.Err())
		}
		if errors.Is(err, streams.ErrConfig) {
			return err
		}
		waiting.set(fmt.Errorf("creating Flow's streams: %w", err))
		logger.WarnContext(ctx, "JetStream cannot create Flow's streams yet; trying again", slog.String("error", err.Error()))
		t := time.NewTimer(provisionInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("provisioning Flow's streams: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// probe answers the service's probes while flowd waits before starting it: /healthz is live (the
// process is doing what it should, so an orchestrator must not restart it), /readyz is 503 with
// what it waits for. The service's own listener takes the address over once it starts.
type probe struct{ reason atomic.Value }

func (p *probe) set(err error) { p.reason.Store(err) }

// serve listens on addr ("off" or "" serve nothing) and returns the function that stops it. A
// listener that cannot start is logged and skipped: the wait goes on without probes.
func (p *probe) serve(addr string, logger *slog.Logger) (stop func()) {
	srv, err := probes.Listen(addr, func(context.Context) error { return p.reason.Load().(error) }, logger)
	if err != nil {
		logger.Warn("serving probes while waiting", slog.String("addr", addr), slog.String("error", err.Error()))
	}
	if srv == nil {
		return func() {}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}
