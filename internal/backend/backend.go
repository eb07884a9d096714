// Package backend is Flow's JetStream backend: for one role (a service, a test harness) it
// opens the ports the engine runs on, the history store (internal/store/jsstore), the host
// (internal/jshost), the payload and checkpoint object stores (internal/payload/objstore) and
// the step heartbeats (FLOW_HEARTBEATS), and returns the engine configured on them, from one
// call. It owns the names of every stream, bucket and subject on JetStream: they are declared in
// its package streams (internal/backend/streams), which also creates them (streams.Ensure,
// streams.Provision); Open expects them to exist.
package backend

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	hbstore "github.com/flowrun/flow/internal/heartbeats"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/internal/store/jsstore"
)

// Role says what a process opens the backend for: what it writes as, and which optional ports
// its engine gets. The zero value (with a Source) is a role that appends and publishes tasks,
// with neither payload offload nor checkpoints.
type Role struct {
	// Source is the ce-source of the events the store appends and of the tasks the host
	// publishes: "flow/history", "flow/ingress", "flow/scheduler", "flow/worker/<queue>".
	Source string
	// Unsigned opens a store that neither signs input events nor checks their signatures, for
	// a role whose NATS user may not read FLOW_SECRETS (workers; jsstore.Options.Unsigned).
	Unsigned bool
	// Logger logs for the host, the heartbeats and the engine; nil for slog.Default().
	Logger *slog.Logger
	// Faults is the fault injector of the engine and the heartbeats, HostFaults the host's
	// (its timer writes and task publishes, jshost.Host.Faults). Nil in production.
	Faults, HostFaults *fault.Injector
	// AsyncTasks makes the host publish resume tasks without waiting for their
	// acknowledgement (jshost.Host.AsyncTasks): for a role whose tasks are a fast path only.
	AsyncTasks bool
	// Offers makes the host offer new runs to live workers as it publishes their first tasks
	// (jshost.Host.Offers): the ingress's eager start.
	Offers bool
	// Payloads opens FLOW_PAYLOADS for the engine, offloading payloads larger than
	// PayloadThreshold bytes (objstore.Open).
	Payloads         bool
	PayloadThreshold int
	// Checkpoints opens FLOW_CHECKPOINTS for the engine: it reads a run it does not hold from
	// its latest checkpoint and the history after it.
	Checkpoints bool
	// Heartbeats records step attempts' starts and heartbeats in FLOW_HEARTBEATS (heartbeats.go),
	// for a role that runs steps (workers).
	Heartbeats bool
	// Host, if set, wraps the JetStream host into the engine's (a worker claims hook tokens
	// from the history service instead of writing them).
	Host func(*jshost.Host) engine.Host
}

// Backend holds the ports Open opened for a role and the engine configured on them. The ports
// are the engine's; the role uses them directly only for what the engine does not do (the
// history service reads its store, the ingress sends tasks with its host).
type Backend struct {
	JS    jetstream.JetStream
	Store *jsstore.Store
	Host  *jshost.Host
	// Payloads and Checkpoints are nil unless the role asked for them.
	Payloads    *objstore.Store
	Checkpoints *objstore.Checkpoints
	// Heartbeats is nil unless the role asked for it.
	Heartbeats engine.Heartbeats
	Engine     *engine.Engine
}

// Open opens role's ports on js and the engine on them. cfg holds the role's own engine settings
// (its runtime, cache size, start keys, pauses, step limits, pending limits...); Open sets its
// Store, Host, Logger, Faults, and Payloads, Checkpoints and Heartbeats as role asks, replacing
// what cfg held in those fields. Flow's streams must exist.
func Open(ctx context.Context, js jetstream.JetStream, role Role, cfg engine.Config) (*Backend, error) {
	logger := role.Logger
	if logger == nil {
		logger = slog.Default()
	}
	b := &Backend{JS: js}
	var err error
	if b.Store, err = jsstore.New(ctx, js, &jsstore.Options{Source: role.Source, Unsigned: role.Unsigned}); err != nil {
		return nil, err
	}
	if b.Host, err = jshost.New(ctx, js, role.Source, logger); err != nil {
		return nil, err
	}
	b.Host.Faults = role.HostFaults
	b.Host.AsyncTasks = role.AsyncTasks
	b.Host.Offers = role.Offers
	cfg.Store, cfg.Host, cfg.Logger, cfg.Faults = b.Store, b.Host, logger, role.Faults
	if role.Host != nil {
		cfg.Host = role.Host(b.Host)
	}
	cfg.Payloads, cfg.Checkpoints, cfg.Heartbeats = nil, nil, nil
	if role.Payloads {
		if b.Payloads, err = objstore.Open(ctx, js, streams.PayloadsBucket, role.PayloadThreshold); err != nil {
			return nil, err
		}
		cfg.Payloads = b.Payloads
	}
	if role.Checkpoints {
		if b.Checkpoints, err = objstore.OpenCheckpoints(ctx, js, streams.CheckpointsBucket); err != nil {
			return nil, err
		}
		cfg.Checkpoints = b.Checkpoints
	}
	if role.Heartbeats {
		if b.Heartbeats, err = openHeartbeats(ctx, js, logger, role.Faults); err != nil {
			return nil, err
		}
		cfg.Heartbeats = b.Heartbeats
	}
	if b.Engine, err = engine.New(cfg); err != nil {
		return nil, fmt.Errorf("configuring the engine of %s: %w", role.Source, err)
	}
	return b, nil
}

// openHeartbeats opens FLOW_HEARTBEATS for the engine's step attempts, which it records as the
// attempts of this process ("<host>-<pid>").
func openHeartbeats(ctx context.Context, js jetstream.JetStream, logger *slog.Logger, faults *fault.Injector) (engine.Heartbeats, error) {
	store, err := hbstore.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	hostname, _ := os.Hostname()
	return &heartbeats{store: store, worker: fmt.Sprintf("%s-%d", hostname, os.Getpid()), logger: logger, faults: faults}, nil
}
