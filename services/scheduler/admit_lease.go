package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/wait"
)

// admissionLease is the admission controller's key in FLOW_LEASES. It is a lease of its own, not
// the timers' one, so that the two may lead in different replicas.
const admissionLease = "admission"

// runAdmission competes for the admission lease and admits runs while it holds it, until ctx
// ends.
func (s *Scheduler) runAdmission(ctx context.Context) {
	defer close(s.admitDone)
	for ctx.Err() == nil {
		renew := s.renewInterval(ctx)
		rev, err := s.acquireLease(ctx, admissionLease)
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				s.logger.Warn("cannot reach the lease bucket", slog.String("error", err.Error()))
			}
			wait.For(ctx, renew)
			continue
		}
		if s.leadAdmission(ctx, rev, renew) {
			wait.For(ctx, restartBackoff)
		}
	}
}

// acquireLease takes lease key if it is free, or if it is held under this replica's name.
func (s *Scheduler) acquireLease(ctx context.Context, key string) (uint64, error) {
	rev, err := s.leases.Create(ctx, key, []byte(s.cfg.Name))
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return rev, err
	}
	held, gerr := s.leases.Get(ctx, key)
	if gerr != nil || string(held.Value()) != s.cfg.Name {
		return 0, err
	}
	return s.leases.Update(ctx, key, []byte(s.cfg.Name), held.Revision())
}

// leadAdmission admits runs while renewing the admission lease, as lead does for timers. A
// leader that loses its lease stops at once; one that overlaps a new leader for a moment cannot
// admit past the limits, since every admission is a compare-and-set of the group's state.
func (s *Scheduler) leadAdmission(ctx context.Context, rev uint64, renew time.Duration) (servingEnded bool) {
	s.logger.Info("admission controller leads")
	s.admitting.Store(true)
	defer s.admitting.Store(false)
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.serveAdmission(leadCtx) }()
	t := time.NewTicker(renew)
	defer t.Stop()
	release := func() {
		rctx, stop := context.WithTimeout(context.Background(), time.Second)
		defer stop()
		_ = s.leases.Delete(rctx, admissionLease, jetstream.LastRevision(rev))
	}
	for {
		select {
		case <-t.C:
			r, err := s.leases.Update(leadCtx, admissionLease, []byte(s.cfg.Name), rev)
			if err != nil {
				s.logger.Warn("lost the admission lease", slog.String("error", err.Error()))
				cancel()
				<-served
				return false
			}
			rev = r
		case err := <-served:
			release()
			if ctx.Err() != nil {
				return false
			}
			s.logger.Warn("stopped admitting runs; released the admission lease to compete again",
				slog.String("error", err.Error()), slog.Duration("backoff", restartBackoff))
			return true
		case <-ctx.Done():
			cancel()
			<-served
			release()
			return false
		}
	}
}
