package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// The worker's concurrency, as services/worker's benchmarks use it: on 2 cores throughput is
// CPU-bound and flat from 8 to 128 runs; step slots equal run slots, so that a run of
// sequential steps never waits for a step slot.
const (
	runConcurrency  = 64
	stepConcurrency = 64
)

// stack is Flow on one NATS server: the history service, the ingress, the scheduler and a
// worker in this process, each on its own connection, and a client on another.
type stack struct {
	nats   natsServer
	logger *slog.Logger
	reg    *flow.Registry

	conns   []*nats.Conn
	history *history.Service
	ingress *ingress.Service
	sched   *scheduler.Scheduler
	worker  *worker.Worker
	// workerConn is the worker's own connection, closed when it stops, as a worker process
	// exiting closes its.
	workerConn *nats.Conn

	// streams sizes Flow's streams: every service is given the same.
	streams streams.Config
	// serialCommits and eager are Options.SerialCommits and Options.EagerStart.
	serialCommits, eager bool

	client *flow.Client
	js     jetstream.JetStream // on the client's connection, for stream statistics
}

// startStack starts the services against ns, as opts configures them (Replicas, SerialCommits,
// EagerStart). The history service creates Flow's streams.
func startStack(ctx context.Context, ns natsServer, opts Options, logger *slog.Logger) (_ *stack, err error) {
	s := &stack{nats: ns, logger: logger, reg: registry(logger), streams: streams.Config{Replicas: max(1, opts.Replicas), Partitions: opts.Partitions},
		serialCommits: opts.SerialCommits, eager: opts.EagerStart}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.stop())
		}
	}()
	conn, err := s.connect("flowbench-history")
	if err != nil {
		return nil, err
	}
	h, err := history.New(history.Config{Conn: conn, HTTPAddr: "off", Logger: logger, Streams: s.streams})
	if err := started(ctx, &s.history, h, err, "the history service"); err != nil {
		return nil, err
	}
	if conn, err = s.connect("flowbench-ingress"); err != nil {
		return nil, err
	}
	// The benchmark's one client stands for many senders: no limit per sender.
	in, err := ingress.New(ingress.Config{Conn: conn, HTTPAddr: "off", Logger: logger, Streams: s.streams, SourceRate: -1, EagerStart: s.eager})
	if err := started(ctx, &s.ingress, in, err, "the ingress"); err != nil {
		return nil, err
	}
	if conn, err = s.connect("flowbench-scheduler"); err != nil {
		return nil, err
	}
	sched, err := scheduler.New(scheduler.Config{Conn: conn, Logger: logger, Streams: s.streams})
	if err := started(ctx, &s.sched, sched, err, "the scheduler"); err != nil {
		return nil, err
	}
	if err := s.startWorker(ctx); err != nil {
		return nil, err
	}
	if conn, err = s.connect("flowbench-client"); err != nil {
		return nil, err
	}
	if s.client, err = flow.NewClient(ctx, conn, nil); err != nil {
		return nil, err
	}
	if s.js, err = jetstream.New(conn); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *stack) connect(name string) (*nats.Conn, error) {
	nc, err := s.nats.Connect(name)
	if err != nil {
		return nil, fmt.Errorf("connecting %s: %w", name, err)
	}
	s.conns = append(s.conns, nc)
	return nc, nil
}

func (s *stack) startWorker(ctx context.Context) error {
	conn, err := s.connect("flowbench-worker")
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{Conn: conn, Logger: s.logger,
		RunConcurrency: runConcurrency, StepConcurrency: stepConcurrency, Streams: s.streams, SerialCommits: s.serialCommits}, s.reg)
	if err := started(ctx, &s.worker, w, err, "the worker"); err != nil {
		return err
	}
	s.workerConn = conn
	return nil
}

// starter is a service of the stack.
type starter interface {
	Start(ctx context.Context) error
}

// started sets *field to svc once svc, which its constructor returned with err, started: the
// stack stops only the services that started.
func started[S starter](ctx context.Context, field *S, svc S, err error, what string) error {
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return fmt.Errorf("starting %s: %w", what, err)
	}
	*field = svc
	return nil
}

// restartWorker stops the worker and starts a new one, with an empty cache, on a new
// connection.
func (s *stack) restartWorker(ctx context.Context) error {
	if err := s.stopWorker(); err != nil {
		return err
	}
	return s.startWorker(ctx)
}

func (s *stack) stopWorker() error {
	if s.worker == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.worker.Stop(ctx)
	s.workerConn.Close()
	s.worker = nil
	if err != nil {
		return fmt.Errorf("stopping the worker: %w", err)
	}
	return nil
}

// stop stops the services and closes the connections (not the NATS server).
func (s *stack) stop() error {
	errs := []error{s.stopWorker()}
	if s.sched != nil {
		errs = append(errs, s.sched.Stop())
	}
	if s.ingress != nil {
		errs = append(errs, s.ingress.Stop())
	}
	if s.history != nil {
		errs = append(errs, s.history.Stop())
	}
	for _, nc := range s.conns {
		nc.Close()
	}
	return errors.Join(errs...)
}

// streamTotals sums, over every stream of the account (Flow's streams and key-value buckets),
// the last sequences (messages ever stored, removed ones included) and the bytes stored.
func (s *stack) streamTotals(ctx context.Context) (written, bytes uint64, err error) {
	list := s.js.ListStreams(ctx)
	for info := range list.Info() {
		written += info.State.LastSeq
		bytes += info.State.Bytes
	}
	return written, bytes, list.Err()
}

// streamWritten returns, by stream of the account, the last sequence (messages ever stored).
func (s *stack) streamWritten(ctx context.Context) (map[string]uint64, error) {
	out := map[string]uint64{}
	list := s.js.ListStreams(ctx)
	for info := range list.Info() {
		out[info.Config.Name] = info.State.LastSeq
	}
	return out, list.Err()
}

// settledWritten waits until no stream takes a message for 250 ms (at most 10 s: the history
// service's follow-up writes, index entries and the like, trail a run's last commit) and
// returns streamTotals' written count.
func (s *stack) settledWritten(ctx context.Context) (uint64, error) {
	deadline := time.Now().Add(10 * time.Second)
	last, _, err := s.streamTotals(ctx)
	if err != nil {
		return 0, err
	}
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		n, _, err := s.streamTotals(ctx)
		if err != nil {
			return 0, err
		}
		if n == last {
			return n, nil
		}
		last = n
	}
	return last, nil
}

// countRuns returns how many runs of definition started at or after since are in status, in
// the history service's runs index.
func (s *stack) countRuns(ctx context.Context, definition string, since time.Time, status flow.Status) (int, error) {
	page, err := s.client.Runs(ctx, &flow.RunsFilter{Definition: definition, Since: since,
		Status: []string{string(status)}, Limit: 1})
	if err != nil {
		return 0, err
	}
	return page.Total, nil
}

// awaitRuns polls the runs index until n runs of definition started at or after since are in
// status, or ctx ends.
func (s *stack) awaitRuns(ctx context.Context, definition string, since time.Time, status flow.Status, n int) error {
	interval := 50 * time.Millisecond
	if n > 10_000 {
		interval = time.Second
	}
	for {
		got, err := s.countRuns(ctx, definition, since, status)
		if err == nil && got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("waiting for %d runs of %s to be %s: %w (last error: %v)", n, definition, status, ctx.Err(), err)
			}
			return fmt.Errorf("waiting for %d runs of %s to be %s: %w; %d are", n, definition, status, ctx.Err(), got)
		case <-time.After(interval):
		}
	}
}
