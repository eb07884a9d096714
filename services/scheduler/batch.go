package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/batch"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
)

// batchLease is the batch executor's key in FLOW_LEASES: a lease of its own, as admission's, so
// that batch jobs may run in another replica than the timers.
const batchLease = "batch"

// batchRescan is how often the executor lists the jobs again, for those it could not run
// (more than BatchConcurrency at once, or a run that failed and is tried again).
const batchRescan = 2 * time.Second

// batchExecutor is the batch executor (docs/batch.md). It runs while its replica holds the batch
// lease (batchLease), and serves the door of the creations and stops of jobs the ingress
// forwards meanwhile (batch_door.go).
//
// Reads and writes: FLOW_BATCHES (batch.Store), of which it is the one writer: each job's
// targets and progress, each write a compare-and-set. Reads the runs index and the runs'
// histories to select a job's targets; writes the operations' events (cancel, terminate, reset,
// signal, ...) to the targets' histories, through the engine.
type batchExecutor struct {
	logger *slog.Logger
	faults *fault.Injector
	// name is the replica's; concurrency, window and opConcurrency are Config's
	// BatchConcurrency, BatchWindow and BatchOpConcurrency.
	name                               string
	concurrency, window, opConcurrency int

	// Set by wire, before Run.
	nc      *nats.Conn
	js      jetstream.JetStream
	batches *batch.Store
	engine  *engine.Engine

	// door is set while the executor serves its door.
	door atomic.Bool
}

// wire hands the executor its connection, repository and engine, before Run.
func (x *batchExecutor) wire(nc *nats.Conn, js jetstream.JetStream, batches *batch.Store, e *engine.Engine) {
	x.nc, x.js, x.batches, x.engine = nc, js, batches, e
}

// Run watches FLOW_BATCHES and runs every job that has not ended, up to BatchConcurrency at
// once, each in its own goroutine, and serves the door of the creations and
// stops the ingress forwards (batch_door.go). It returns when ctx ends, the watch fails, or a
// job's run hits an injected fault (the executor's death).
func (x *batchExecutor) Run(ctx context.Context) error {
	ex := &batch.Executor{Store: x.batches, JS: x.js, Engine: batch.Adapt(x.engine), Name: x.name, Window: x.window,
		Concurrency: x.opConcurrency, Faults: x.faults, Logger: x.logger}
	closeDoor, err := x.serveDoor()
	if err != nil {
		return err
	}
	defer closeDoor()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := x.batches.Watch(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	var (
		mu      sync.Mutex
		running = map[string]bool{}
		wg      sync.WaitGroup
		died    = make(chan error, 1)
	)
	defer wg.Wait()
	start := func(j batch.Job) {
		if j.State.Ended() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if running[j.ID] || len(running) >= x.concurrency {
			return
		}
		running[j.ID] = true
		wg.Go(func() {
			err := ex.Run(ctx, j.ID)
			mu.Lock()
			delete(running, j.ID)
			mu.Unlock()
			switch {
			case errors.Is(err, fault.ErrInjected):
				select {
				case died <- err:
				default:
				}
			case err != nil && ctx.Err() == nil && !errors.Is(err, batch.ErrLost):
				x.logger.Warn("batch job interrupted; trying again", slog.String("job", j.ID), slog.String("error", err.Error()))
			}
		})
	}
	rescan := time.NewTicker(batchRescan)
	defer rescan.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-died:
			cancel()
			return err
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch of FLOW_BATCHES closed")
			}
			if e == nil {
				continue
			}
			if e.Err == nil {
				start(e.Value)
			}
		case <-rescan.C:
			jobs, err := x.batches.List(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				x.logger.Warn("cannot list the batch jobs", slog.String("error", err.Error()))
				continue
			}
			for i := len(jobs) - 1; i >= 0; i-- { // oldest first
				start(jobs[i])
			}
		}
	}
}

// Batching reports whether this replica holds the batch lease and executes batch jobs.
func (s *Scheduler) Batching() bool { return s.batchLease.Leading() }
