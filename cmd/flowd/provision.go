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

	"github.com/flowrun/flow/internal/backend/streams"
	probes "github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/natsconn"
)

// provisionInterval is how often a service that waits for Flow's streams checks again.
const provisionInterval = 3 * time.Second

// awaitStreams returns once Flow's streams and buckets exist on the server cfg reaches, logging
// what is missing while it waits. The ingress, scheduler and worker call it before they start:
// in Flow's deployments only the history service's NATS user may create the streams
// (internal/natsperm), so the others wait for it instead of failing when they start first.
func awaitStreams(ctx context.Context, cfg natsconn.Config, role, httpAddr string, logger *slog.Logger) error {
	err := beforeStart(ctx, cfg.As(role), "flowd "+role+" (awaiting Flow's streams)", httpAddr, "waiting for the history service to create Flow's streams", logger,
		func(js jetstream.JetStream, p *probe) error {
			return streams.AwaitProvisioned(ctx, js, provisionInterval, func(missing []string, err error) {
				if err != nil {
					p.set("waiting for JetStream: %v", err)
					logger.WarnContext(ctx, "waiting for JetStream to answer before starting", slog.String("service", role), slog.String("error", err.Error()))
					return
				}
				p.set("waiting for the history service to create %s", strings.Join(missing, ", "))
				logger.WarnContext(ctx, "waiting for the history service to create Flow's streams before starting; start `flowd history` if it is not running",
					slog.String("service", role), slog.String("missing", strings.Join(missing, ",")))
			})
		})
	if err != nil {
		return fmt.Errorf("waiting for Flow's streams: %w", err)
	}
	return nil
}

// provisionStreams creates or updates Flow's streams and buckets for the history service
// (streams.Provision, which also turns rollups off on streams created before), trying
// again while JetStream cannot do it yet: a cluster that is still forming (no meta leader, too
// few peers for the replicas asked) answers with errors or not at all for a while, and a
// service that exited then would leave compose's depends_on and Kubernetes' back-off to bring
// it back late.
func provisionStreams(ctx context.Context, cfg natsconn.Config, sc streams.Config, httpAddr string, logger *slog.Logger) error {
	return beforeStart(ctx, cfg.As(natsconn.RoleHistory), "flowd history (provisioning Flow's streams)", httpAddr, "creating Flow's streams", logger,
		func(js jetstream.JetStream, p *probe) error {
			for {
				ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := streams.Provision(ectx, js, sc)
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
				p.set("creating Flow's streams: %v", err)
				logger.WarnContext(ctx, "JetStream cannot create Flow's streams yet; trying again", slog.String("error", err.Error()))
				t := time.NewTimer(provisionInterval)
				select {
				case <-ctx.Done():
					t.Stop()
					return fmt.Errorf("provisioning Flow's streams: %w", ctx.Err())
				case <-t.C:
				}
			}
		})
}

// beforeStart runs wait on a connection of its own, named name, while it serves the service's
// probes on httpAddr, not ready for reason until wait says otherwise; the connection and the
// listener are closed when wait returns, before the service starts.
func beforeStart(ctx context.Context, cfg natsconn.Config, name, httpAddr, reason string, logger *slog.Logger,
	wait func(js jetstream.JetStream, p *probe) error) error {
	p := &probe{}
	p.set("%s", reason)
	defer p.serve(httpAddr, logger)()
	nc, err := cfg.Dial(name)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return wait(js, p)
}

// probe answers the service's probes while flowd waits before starting it: /healthz is live (the
// process is doing what it should, so an orchestrator must not restart it), /readyz is 503 with
// what it waits for. The service's own listener takes the address over once it starts.
type probe struct{ reason atomic.Pointer[string] }

// set makes the reason readiness reports Sprintf(format, args...). Safe for concurrent use.
func (p *probe) set(format string, args ...any) {
	r := fmt.Sprintf(format, args...)
	p.reason.Store(&r)
}

// serve listens on addr ("off" or "" serve nothing) and returns the function that stops it. A
// listener that cannot start is logged and skipped: the wait goes on without probes.
func (p *probe) serve(addr string, logger *slog.Logger) (stop func()) {
	srv, err := probes.Listen(addr, func(context.Context) error { return errors.New(*p.reason.Load()) }, logger)
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
