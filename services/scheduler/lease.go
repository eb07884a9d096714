package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/wait"
)

// leased is a loop that runs while this replica holds a lease of its own in FLOW_LEASES (the
// admission controller, the schedule runner), beside the timers' lease.
type leased struct {
	// key is the lease's key; role and doing name the loop in its log lines ("admission
	// controller leads", "stopped admitting runs").
	key, role, doing string
	// leading is set while this replica holds the lease.
	leading *atomic.Bool
	// serve runs until ctx ends (nil) or it fails (why).
	serve func(ctx context.Context) error
}

// runLeased competes for l's lease and serves while it holds it, until ctx ends.
func (s *Scheduler) runLeased(ctx context.Context, l leased) {
	for ctx.Err() == nil {
		renew := s.renewInterval(ctx)
		rev, err := s.acquireLease(ctx, l.key)
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				s.logger.Warn("cannot reach the lease bucket", slog.String("error", err.Error()))
			}
			wait.For(ctx, renew)
			continue
		}
		if s.leadLeased(ctx, l, rev, renew) {
			wait.For(ctx, restartBackoff)
		}
	}
}

// leadLeased serves l while renewing its lease, as lead does for timers. A leader that loses its
// lease stops at once; one that overlaps a new leader for a moment must be harmless, which each
// loop ensures by writing its state by compare-and-set. It reports whether serve ended on its
// own (the caller backs off before competing again).
func (s *Scheduler) leadLeased(ctx context.Context, l leased, rev uint64, renew time.Duration) (servingEnded bool) {
	s.logger.Info(l.role + " leads")
	l.leading.Store(true)
	defer l.leading.Store(false)
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- l.serve(leadCtx) }()
	t := time.NewTicker(renew)
	defer t.Stop()
	release := func() {
		rctx, stop := context.WithTimeout(context.Background(), time.Second)
		defer stop()
		_ = s.leases.Delete(rctx, l.key, jetstream.LastRevision(rev))
	}
	for {
		select {
		case <-t.C:
			r, err := s.leases.Update(leadCtx, l.key, []byte(s.cfg.Name), rev)
			if err != nil {
				s.logger.Warn("lost the "+l.key+" lease", slog.String("error", err.Error()))
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
			s.logger.Warn("stopped "+l.doing+"; released the "+l.key+" lease to compete again",
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
