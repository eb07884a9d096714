// Package maintenance runs Flow's background jobs, each in the one replica that holds its lease
// in FLOW_LEASES, in the style of River's maintenance services. A job is a small type that owns
// its state, counters and goroutines and exposes Run(ctx); a Lease competes for its key and runs
// the job while it holds it, so that the leader runs it and a follower runs none. The scheduler
// hosts the timers, admission, heartbeat timeouts, batch jobs and schedules
// (services/scheduler); the history service hosts retention, the reconciler and the payload
// collector (services/history), the history role alone being allowed to purge streams.
//
// Leases is FLOW_LEASES's repository: the bucket's keys are the leases' names, its values the
// names of the replicas holding them, and every writer writes the keys of its own leases only,
// by compare-and-set.
package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/typedkv"
	"github.com/flowrun/flow/internal/wait"
)

// Job is a background job. Run runs it until ctx ends (it returns nil) or it fails (it returns
// why); a job run under a Lease must be harmless when two replicas run it for a moment (a
// leader that lost its lease and has not seen it yet), which each job ensures by writing its
// state by compare-and-set or idempotently.
type Job interface {
	Run(ctx context.Context) error
}

// JobFunc adapts a function to a Job.
type JobFunc func(ctx context.Context) error

// Run calls f.
func (f JobFunc) Run(ctx context.Context) error { return f(ctx) }

// Periodic returns a job that calls pass at once and then every interval, until ctx ends. A
// pass reports its own failures; the job never fails.
func Periodic(interval time.Duration, pass func(context.Context)) Job {
	return JobFunc(func(ctx context.Context) error {
		for {
			pass(ctx)
			if !wait.For(ctx, interval) {
				return nil
			}
		}
	})
}

// Leases is the FLOW_LEASES bucket: one entry per lease, keyed by the lease's name, holding the
// name of the replica that holds it. Entries expire with the bucket's TTL unless renewed. It is
// safe for concurrent use.
type Leases struct {
	b *typedkv.Bucket[string]
}

// holderCodec stores a holder's name as the entry's bytes, not JSON.
var holderCodec = typedkv.Codec[string]{
	Encode: func(holder string) ([]byte, error) { return []byte(holder), nil },
	Decode: func(value []byte) (string, error) { return string(value), nil },
}

// OpenLeases opens FLOW_LEASES, which streams.Ensure creates.
func OpenLeases(ctx context.Context, js jetstream.JetStream) (*Leases, error) {
	b, err := typedkv.OpenCodec(ctx, js, streams.LeasesBucket, holderCodec)
	if err != nil {
		return nil, err
	}
	return &Leases{b: b}, nil
}

// ErrHeld is wrapped by Acquire when another replica holds the lease.
var ErrHeld = jetstream.ErrKeyExists

// Acquire takes lease key for holder if it is free, or if holder holds it already (the same
// replica, restarted before its lease expired), and returns the entry's revision. It returns
// an error wrapping ErrHeld when another replica holds it.
func (l *Leases) Acquire(ctx context.Context, key, holder string) (uint64, error) {
	rev, err := l.b.Create(ctx, key, holder)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return rev, err
	}
	held, found, gerr := l.b.Get(ctx, key)
	if gerr != nil || !found || held.Value != holder {
		return 0, err
	}
	return l.b.Update(ctx, key, holder, held.Revision)
}

// Renew renews lease key of holder, at revision rev (its last write), and returns the new
// revision; an error means the lease is lost.
func (l *Leases) Renew(ctx context.Context, key, holder string, rev uint64) (uint64, error) {
	return l.b.Update(ctx, key, holder, rev)
}

// Release deletes lease key if it is still at revision rev, so that another replica takes it at
// once. It waits at most a second, whatever becomes of the lease.
func (l *Leases) Release(key string, rev uint64) {
	ctx, stop := context.WithTimeout(context.Background(), time.Second)
	defer stop()
	_ = l.b.Delete(ctx, key, rev)
}

// Holder returns the replica holding lease key, "" when none does.
func (l *Leases) Holder(ctx context.Context, key string) (string, error) {
	e, _, err := l.b.Get(ctx, key)
	if err != nil {
		return "", err
	}
	return e.Value, nil
}

// RenewInterval is a third of the bucket's TTL as configured on the server, which the last
// process to call streams.Ensure set, or of ttl when the server cannot tell; at least 100ms.
func (l *Leases) RenewInterval(ctx context.Context, ttl time.Duration) time.Duration {
	if st, err := l.b.Status(ctx); err == nil && st.TTL() > 0 {
		ttl = st.TTL()
	}
	return max(ttl/3, 100*time.Millisecond)
}

// Lease runs a job while its replica holds lease Key in FLOW_LEASES. Fill its fields, then call
// Run once; Leading may be called from any goroutine.
type Lease struct {
	// Leases is the bucket; Key the lease's name; Holder this replica's name.
	Leases      *Leases
	Key, Holder string
	// Role and Doing name the job in log lines ("<Role> leads", "stopped <Doing>; released the
	// <Key> lease to compete again").
	Role, Doing string
	// TTL is the lease's time to live when the server cannot tell it (see RenewInterval).
	TTL time.Duration
	// Backoff is how long the replica waits, without the lease, after its job failed, before
	// it competes again.
	Backoff time.Duration
	// Dies, if set, reports the errors on which the job dies as if its process crashed: Run
	// then returns at once without releasing the lease, and a standby takes over once the
	// lease expires (fault injection).
	Dies func(error) bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	leading atomic.Bool
}

// Leading reports whether this replica holds the lease and runs the job.
func (l *Lease) Leading() bool { return l.leading.Load() }

func (l *Lease) logger() *slog.Logger {
	if l.Logger == nil {
		return slog.Default()
	}
	return l.Logger
}

// Run competes for the lease and runs job while it holds it, until ctx ends or the job dies
// (Dies). When job fails it releases the lease, waits Backoff and competes again, so that no
// replica holds the lease while its job does nothing.
func (l *Lease) Run(ctx context.Context, job Job) {
	for ctx.Err() == nil {
		renew := l.Leases.RenewInterval(ctx, l.TTL)
		rev, err := l.Leases.Acquire(ctx, l.Key, l.Holder)
		if err != nil {
			if !errors.Is(err, ErrHeld) && ctx.Err() == nil {
				l.logger().Warn("cannot reach the lease bucket", slog.String("error", err.Error()))
			}
			wait.For(ctx, renew)
			continue
		}
		died, failed := l.lead(ctx, job, rev, renew)
		if died {
			return
		}
		if failed {
			wait.For(ctx, l.Backoff)
		}
	}
}

// lead runs job while renewing the lease. A leader that loses its lease stops its job at once.
// It reports whether the job died (Dies), or failed on its own (the caller backs off).
func (l *Lease) lead(ctx context.Context, job Job, rev uint64, renew time.Duration) (died, failed bool) {
	log := l.logger()
	log.Info(l.Role + " leads")
	l.leading.Store(true)
	defer l.leading.Store(false)
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- job.Run(leadCtx) }()
	t := time.NewTicker(renew)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r, err := l.Leases.Renew(leadCtx, l.Key, l.Holder, rev)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("lost the "+l.Key+" lease", slog.String("error", err.Error()))
				}
				cancel()
				<-served
				return false, false
			}
			rev = r
		case err := <-served:
			if err != nil && l.Dies != nil && l.Dies(err) {
				log.Warn("the "+l.Role+" dies", slog.String("error", err.Error()))
				return true, false
			}
			l.Leases.Release(l.Key, rev)
			if ctx.Err() != nil {
				return false, false
			}
			if err == nil {
				err = errors.New("it returned")
			}
			log.Warn("stopped "+l.Doing+"; released the "+l.Key+" lease to compete again",
				slog.String("error", err.Error()), slog.Duration("backoff", l.Backoff))
			return false, true
		case <-ctx.Done():
			cancel()
			<-served
			l.Leases.Release(l.Key, rev)
			return false, false
		}
	}
}
