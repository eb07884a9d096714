package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/batch"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/wait"
)

// batchLease is the batch executor's key in FLOW_LEASES: a lease of its own, as admission's, so
// that batch jobs may run in another replica than the timers.
const batchLease = "batch"

// batchRescan is how often the executor lists the jobs again, for those it could not run
// (more than BatchConcurrency at once, or a run that failed and is tried again).
const batchRescan = 2 * time.Second

// runBatches competes for the batch lease and executes batch jobs while it holds it, until ctx
// ends, or until an injected fault "kills" the executor (then it stops competing, without
// releasing its lease: a standby takes over once the lease expires, as after a crash).
func (s *Scheduler) runBatches(ctx context.Context) {
	defer close(s.batchDone)
	for ctx.Err() == nil {
		renew := s.renewInterval(ctx)
		rev, err := s.acquireLease(ctx, batchLease)
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				s.logger.Warn("cannot reach the lease bucket", slog.String("error", err.Error()))
			}
			wait.For(ctx, renew)
			continue
		}
		crashed, servingEnded := s.leadBatches(ctx, rev, renew)
		if crashed {
			return
		}
		if servingEnded {
			wait.For(ctx, restartBackoff)
		}
	}
}

// leadBatches executes jobs while renewing the batch lease.
func (s *Scheduler) leadBatches(ctx context.Context, rev uint64, renew time.Duration) (crashed, servingEnded bool) {
	s.logger.Info("batch executor leads")
	s.batching.Store(true)
	defer s.batching.Store(false)
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.serveBatches(leadCtx) }()
	t := time.NewTicker(renew)
	defer t.Stop()
	release := func() {
		rctx, stop := context.WithTimeout(context.Background(), time.Second)
		defer stop()
		_ = s.leases.Delete(rctx, batchLease, jetstream.LastRevision(rev))
	}
	for {
		select {
		case <-t.C:
			r, err := s.leases.Update(leadCtx, batchLease, []byte(s.cfg.Name), rev)
			if err != nil {
				s.logger.Warn("lost the batch lease", slog.String("error", err.Error()))
				cancel()
				<-served
				return false, false
			}
			rev = r
		case err := <-served:
			if errors.Is(err, fault.ErrInjected) {
				s.logger.Warn("injected fault: the batch executor dies", slog.String("error", err.Error()))
				return true, false
			}
			release()
			if ctx.Err() != nil {
				return false, false
			}
			s.logger.Warn("stopped executing batch jobs; released the batch lease to compete again",
				slog.String("error", err.Error()), slog.Duration("backoff", restartBackoff))
			return false, true
		case <-ctx.Done():
			cancel()
			<-served
			release()
			return false, false
		}
	}
}

// serveBatches watches FLOW_BATCHES and runs every job that has not ended, up to
// BatchConcurrency at once, each in its own goroutine, and serves the door of the creations and
// stops the ingress forwards (batch_door.go). It returns when ctx ends, the watch fails, or a
// job's run hits an injected fault (the executor's death).
func (s *Scheduler) serveBatches(ctx context.Context) error {
	x := &batch.Executor{Store: s.batches, JS: s.js, Engine: batch.Adapt(s.engine), Name: s.cfg.Name, Window: s.cfg.BatchWindow,
		Concurrency: s.cfg.BatchOpConcurrency, Faults: s.cfg.Faults, Logger: s.logger}
	closeDoor, err := s.serveBatchDoor()
	if err != nil {
		return err
	}
	defer closeDoor()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.batches.Watch(ctx)
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
		if running[j.ID] || len(running) >= s.cfg.BatchConcurrency {
			return
		}
		running[j.ID] = true
		wg.Go(func() {
			err := x.Run(ctx, j.ID)
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
				s.logger.Warn("batch job interrupted; trying again", slog.String("job", j.ID), slog.String("error", err.Error()))
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
			var j batch.Job
			if json.Unmarshal(e.Value(), &j) == nil {
				start(j)
			}
		case <-rescan.C:
			jobs, err := s.batches.List(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.logger.Warn("cannot list the batch jobs", slog.String("error", err.Error()))
				continue
			}
			for i := len(jobs) - 1; i >= 0; i-- { // oldest first
				start(jobs[i])
			}
		}
	}
}

// Batching reports whether this replica holds the batch lease and executes batch jobs.
func (s *Scheduler) Batching() bool { return s.batching.Load() }
