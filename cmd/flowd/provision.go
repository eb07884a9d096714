package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/streams"
)

// provisionInterval is how often a service that waits for Flow's streams checks again.
const provisionInterval = 3 * time.Second

// awaitStreams returns once Flow's streams and buckets exist on the server cfg reaches, logging
// what is missing while it waits. The ingress, scheduler and worker call it before they start:
// in Flow's deployments only the history service's NATS user may create the streams
// (internal/natsperm), so the others wait for it instead of failing when they start first.
func awaitStreams(ctx context.Context, cfg natsconn.Config, role string, logger *slog.Logger) error {
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
			logger.WarnContext(ctx, "waiting for JetStream to answer before starting", slog.String("service", role), slog.String("error", err.Error()))
			return
		}
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
func provisionStreams(ctx context.Context, cfg natsconn.Config, sc streams.Config, logger *slog.Logger) error {
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
