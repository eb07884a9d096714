// Package worker runs the workflows and steps of a [flow.Registry] against a Flow deployment
// (`flow dev`, or flowd's services beside a NATS server): it pulls the resume tasks of its
// queue, asks the registry's workflows for their decisions, runs their step attempts, and
// answers their queries, until it is stopped. Run as many workers as you like, in as many
// processes: they share the queue's tasks.
//
//	reg := flow.NewRegistry(nil)
//	flow.RegisterWorkflow(reg, "greet", greet)
//	flow.RegisterStep(reg, "compose", compose)
//	w, err := worker.New(reg, &worker.Options{URL: "nats://127.0.0.1:4222"})
//	...
//	err = w.Run(ctx) // until ctx ends
//
// A worker needs the NATS permissions of Flow's worker role (docs/operations.md).
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/pkg/flow"
	sworker "github.com/flowrun/flow/services/worker"
)

// Options configure a Worker. The zero value works against a local `flow dev`.
type Options struct {
	// URL is the NATS server to connect to when Conn is nil, or several comma-separated
	// (nats://n1:4222,nats://n2:4222). "" means the environment's FLOW_NATS_URL, then NATS_URL,
	// then the selected nats CLI context's, then nats://127.0.0.1:4222; credentials and TLS
	// come from the environment as for flowd (docs/operations.md).
	URL string
	// Conn is an existing connection to use instead of dialling URL; the worker does not close
	// it. Under Flow's NATS permissions it must be the worker role's user, with its inbox
	// prefix: nats.CustomInboxPrefix(InboxPrefix).
	Conn *nats.Conn
	// Queue is the task queue the worker serves. Defaults to "default". Runs started on another
	// queue are not this worker's.
	Queue string
	// Runs caps the runs driven at once. Defaults to 64.
	Runs int
	// Steps caps the step attempts running at once. Defaults to 64, as many as Runs: fewer
	// step slots than runs make one run's next step wait for another's. Lower it when steps
	// are CPU-bound.
	Steps int
	// Logger receives the worker's logs (workflow and step logs go to the registry's logger).
	// Defaults to slog.Default().
	Logger *slog.Logger
	// StopTimeout bounds how long Run waits, once its context ends, for the step attempts in
	// flight to finish before it cancels them. Defaults to 30 seconds.
	StopTimeout time.Duration
}

// InboxPrefix is the prefix of the reply inboxes of Flow's worker role: a connection given in
// Options.Conn under Flow's NATS permissions must use it (nats.CustomInboxPrefix).
const InboxPrefix = "_INBOX." + natsconn.RoleWorker

// defaultStopTimeout is Options.StopTimeout's default.
const defaultStopTimeout = 30 * time.Second

// Worker runs the workflows and steps of one registry. Start it once and Stop it once (or Run
// it once). The build it serves is the registry's (flow.RegistryOptions.BuildID): runs pinned to
// another build are left to the workers of that build.
type Worker struct {
	w           *sworker.Worker
	stopTimeout time.Duration
}

// New returns a worker for the workflows and steps of reg, which must have all its
// registrations done. opts may be nil. It connects only when started.
func New(reg *flow.Registry, opts *Options) (*Worker, error) {
	if reg == nil {
		return nil, errors.New("worker: New needs a registry (flow.NewRegistry)")
	}
	if opts == nil {
		opts = &Options{}
	}
	switch {
	case opts.Runs < 0:
		return nil, fmt.Errorf("worker: Options.Runs must not be negative, got %d", opts.Runs)
	case opts.Steps < 0:
		return nil, fmt.Errorf("worker: Options.Steps must not be negative, got %d", opts.Steps)
	case opts.StopTimeout < 0:
		return nil, fmt.Errorf("worker: Options.StopTimeout must not be negative, got %s", opts.StopTimeout)
	}
	cfg := sworker.Config{NATS: natsconn.Config{URL: opts.URL}, Conn: opts.Conn, Queue: opts.Queue,
		RunConcurrency: opts.Runs, StepConcurrency: opts.Steps, Logger: opts.Logger}
	w, err := sworker.New(cfg, reg)
	if err != nil {
		return nil, err
	}
	stop := opts.StopTimeout
	if stop == 0 {
		stop = defaultStopTimeout
	}
	return &Worker{w: w, stopTimeout: stop}, nil
}

// Start connects (unless Options.Conn is set), creates Flow's streams if they are missing,
// registers the worker and the definitions it serves, and starts taking tasks. It returns once
// the worker is consuming, or the error that stopped it.
func (w *Worker) Start(ctx context.Context) error { return w.w.Start(ctx) }

// Stop stops taking tasks and waits for the runs being driven to reach a durable point, so that
// the step attempts in flight finish and their results are recorded; when ctx ends first, those
// attempts see their context cancelled and their tasks go to other workers. It closes the
// connection the worker dialled. Stop is idempotent and safe before Start.
func (w *Worker) Stop(ctx context.Context) error { return w.w.Stop(ctx) }

// Run starts the worker, serves until ctx ends, then stops it, waiting at most
// Options.StopTimeout for the attempts in flight. It returns Start's error, or Stop's, and nil
// after a clean stop.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.stopTimeout)
	defer cancel()
	return w.Stop(sctx)
}

// Holds reports whether the worker holds the runs of definition: it has seen a pause of the
// definition or of its queue (client.Pauses()), which reaches workers through a watch within
// milliseconds of the pause, and starts no decision or attempt of them until the pause ends.
func (w *Worker) Holds(definition string) bool { return w.w.Holds(definition) }

// ID returns the worker's ID, as FLOW_WORKERS and the runs it parks name it; "" before Start.
func (w *Worker) ID() string { return w.w.ID() }
