// Package scheduler fires Flow's durable timers: waits (Sleep, WaitUntil) and retry backoffs.
//
// The history service registers every pending timer in the FLOW_TIMERS bucket, as it follows
// the history stream. The scheduler that holds the lease watches the bucket, keeps the pending
// timers in memory in due order (one goroutine for all of them, none per run), and when one
// falls due appends its firing event to the run's history (wait.fired or step.retry_fired),
// sends the run's resume task as a fast path (the history service derives it too), and deletes
// the entry only once the firing is committed or found moot.
//
// Nothing is missed across restarts: the bucket is durable, and a scheduler that starts fires
// every overdue timer at once, in due order. Firing twice never changes history: the core
// appends a firing only while the timer is pending in the run's history, at the expected
// sequence. Several replicas may run; one holds the lease in FLOW_LEASES and fires, the others
// wait to take over. Precision is that of the Go runtime timer, well under a second.
package scheduler

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/streams"
	"github.com/flowrun/flow/internal/wait"
)

// Config configures a Scheduler. The zero value works against a local `flow dev`. Load it from
// the environment with envconfig.Process("FLOW", &cfg).
type Config struct {
	// NATS says how to connect when Conn is nil: servers, credentials, TLS, or a nats CLI
	// context, from FLOW_NATS_URL, FLOW_NATS_CREDS, FLOW_NATS_NKEY, FLOW_NATS_TLS_CA,
	// FLOW_NATS_TLS_CERT, FLOW_NATS_TLS_KEY, FLOW_NATS_CONTEXT and the nats CLI's NATS_URL, ... (see
	// natsconn.Config and docs/operations.md). Defaults to nats://127.0.0.1:4222 when neither
	// the environment nor a nats context says otherwise.
	NATS natsconn.Config `envconfig:"NATS"`
	// Conn is an existing connection to use instead of dialling with NATS. The scheduler does not
	// close it.
	Conn *nats.Conn `ignored:"true"`
	// Name identifies this replica in the lease. A replica restarted under the same name takes
	// its lease back at once instead of waiting for it to expire; names must therefore be unique
	// among live replicas. Defaults to "<hostname>-<pid>-<random>".
	Name string `envconfig:"SCHEDULER_NAME"`
	// HTTPAddr is where GET /healthz, /readyz and /metrics are served, host:port; port 0 picks
	// a free one (see Scheduler.HTTPAddr); "off" disables them. Loaded with envconfig (as flowd
	// does) it defaults to 127.0.0.1:8422 (DefaultHTTPAddr). The zero value, as in a program
	// or a test that embeds a scheduler, serves no HTTP: many schedulers may share a process.
	HTTPAddr string `envconfig:"SCHEDULER_HTTP_ADDR" default:"127.0.0.1:8422"`
	// FireConcurrency caps the timers being fired at once. Defaults to 8.
	FireConcurrency int `envconfig:"FIRE_CONCURRENCY"`
	// Streams sizes Flow's streams, created or updated at start; Streams.LeaseTTL is how long a
	// dead leader holds the lease before a standby takes over.
	Streams streams.Config `envconfig:"STREAMS"`
	// Logger defaults to slog.Default().
	Logger *slog.Logger `ignored:"true"`
	// Faults injects failures between writes, for tests. Defaults to nil (none).
	Faults *fault.Injector `ignored:"true"`
}

// DefaultHTTPAddr is where flowd's scheduler serves its probes and metrics unless
// FLOW_SCHEDULER_HTTP_ADDR says otherwise.
const DefaultHTTPAddr = "127.0.0.1:8422"

// leaseKey is the scheduler's key in FLOW_LEASES.
const leaseKey = "scheduler"

// Scheduler fires timers. Start it once; Stop it once.
type Scheduler struct {
	cfg    Config
	logger *slog.Logger

	nc      *nats.Conn
	ownConn bool
	timers  jetstream.KeyValue
	leases  jetstream.KeyValue
	engine  *engine.Engine
	// watchTimers opens the watch on FLOW_TIMERS; nil means s.timers.WatchAll. Tests replace it.
	watchTimers func(context.Context) (jetstream.KeyWatcher, error)

	// probes serves /healthz, /readyz and /metrics (nil when off); readiness follows Start and Stop.
	probes    *health.Server
	readiness health.State

	leader  atomic.Bool
	fired   atomic.Int64
	cancel  context.CancelFunc
	done    chan struct{}
	started chan struct{}
	once    sync.Once
}

// New returns a scheduler.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), nuid.Next()[:6])
	}
	if cfg.FireConcurrency == 0 {
		cfg.FireConcurrency = 8
	}
	if cfg.FireConcurrency < 0 {
		return nil, fmt.Errorf("scheduler: FireConcurrency must be positive, got %d", cfg.FireConcurrency)
	}
	if cfg.Streams.LeaseTTL == 0 {
		cfg.Streams.LeaseTTL = 10 * time.Second
	}
	if err := health.CheckAddr(cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("scheduler: HTTPAddr (FLOW_SCHEDULER_HTTP_ADDR) %w", err)
	}
	if cfg.Streams.LeaseTTL < time.Second {
		return nil, fmt.Errorf("scheduler: Streams.LeaseTTL must be at least 1s, got %s", cfg.Streams.LeaseTTL)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Scheduler{cfg: cfg, logger: logger.With(slog.String("component", "scheduler"), slog.String("replica", cfg.Name)),
		done: make(chan struct{}), started: make(chan struct{})}, nil
}

// Start connects, creates Flow's streams if needed, and starts competing for the lease.
func (s *Scheduler) Start(ctx context.Context) error {
	var err error
	if s.nc, s.ownConn, err = s.cfg.NATS.Use(s.cfg.Conn, "flow-scheduler"); err != nil {
		return err
	}
	err = s.open(ctx)
	if err == nil {
		if s.probes, err = health.Listen(s.cfg.HTTPAddr, s.Ready, s.logger); err != nil {
			err = fmt.Errorf("scheduler: listening on %s for /healthz, /readyz and /metrics: %w (set FLOW_SCHEDULER_HTTP_ADDR to another address, or \"off\")", s.cfg.HTTPAddr, err)
		}
	}
	if err != nil {
		if s.ownConn {
			s.nc.Close()
		}
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	go s.run(runCtx)
	close(s.started)
	s.readiness.Started()
	return nil
}

func (s *Scheduler) open(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return err
	}
	if err := streams.Ensure(ctx, js, s.cfg.Streams); err != nil {
		return err
	}
	if s.timers, err = js.KeyValue(ctx, streams.TimersBucket); err != nil {
		return err
	}
	if s.leases, err = js.KeyValue(ctx, streams.LeasesBucket); err != nil {
		return err
	}
	st, err := jsstore.New(ctx, js, &jsstore.Options{Source: "flow/scheduler"})
	if err != nil {
		return err
	}
	host, err := jshost.New(ctx, js, "flow/scheduler", s.logger)
	if err != nil {
		return err
	}
	host.Faults = s.cfg.Faults
	s.engine, err = engine.New(engine.Config{Store: st, Host: host, Logger: s.logger, Faults: s.cfg.Faults})
	return err
}

// Leader reports whether this replica holds the lease and fires timers.
func (s *Scheduler) Leader() bool { return s.leader.Load() }

// Fired returns the number of timers this replica fired.
func (s *Scheduler) Fired() int64 { return s.fired.Load() }

// Stop stops firing, releases the lease so that a standby takes over at once, and waits. It is
// idempotent and safe before Start.
func (s *Scheduler) Stop() error {
	s.once.Do(func() {
		select {
		case <-s.started:
		default:
			return
		}
		s.readiness.Stopping()
		s.cancel()
		<-s.done
		if s.ownConn {
			s.nc.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.probes.Shutdown(ctx)
	})
	return nil
}

// restartBackoff is how long a replica whose timer watch ended waits, without the lease, before
// it competes again: long enough not to spin on a watch that keeps failing, short enough that
// timers fire on time once the watch works again, here or in a standby.
const restartBackoff = time.Second

// run competes for the lease and serves while it holds it.
func (s *Scheduler) run(ctx context.Context) {
	defer close(s.done)
	for ctx.Err() == nil {
		renew := s.renewInterval(ctx)
		rev, err := s.acquire(ctx)
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				s.logger.Warn("cannot reach the lease bucket", slog.String("error", err.Error()))
			}
			wait.For(ctx, renew)
			continue
		}
		if s.lead(ctx, rev, renew) {
			wait.For(ctx, restartBackoff)
		}
	}
}

// renewInterval is a third of the lease bucket's TTL as configured on the server, which the last
// process to call streams.Ensure set, whatever this replica's own configuration says.
func (s *Scheduler) renewInterval(ctx context.Context) time.Duration {
	ttl := s.cfg.Streams.LeaseTTL
	if st, err := s.leases.Status(ctx); err == nil && st.TTL() > 0 {
		ttl = st.TTL()
	}
	return max(ttl/3, 100*time.Millisecond)
}

// acquire takes the lease if it is free, or if it is held under this replica's name (the same
// replica, restarted before its lease expired).
func (s *Scheduler) acquire(ctx context.Context) (uint64, error) {
	rev, err := s.leases.Create(ctx, leaseKey, []byte(s.cfg.Name))
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return rev, err
	}
	held, gerr := s.leases.Get(ctx, leaseKey)
	if gerr != nil || string(held.Value()) != s.cfg.Name {
		return 0, err
	}
	return s.leases.Update(ctx, leaseKey, []byte(s.cfg.Name), held.Revision())
}

// lead serves while renewing the lease. It releases the lease when ctx ends, and when serving
// ends on its own (the timer watch failed or closed), so that no replica holds the lease while
// nothing fires; it then reports true and the caller backs off before competing again.
func (s *Scheduler) lead(ctx context.Context, rev uint64, renew time.Duration) (servingEnded bool) {
	s.logger.Info("scheduler leads")
	s.leader.Store(true)
	defer s.leader.Store(false)
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.serve(leadCtx) }()
	t := time.NewTicker(renew)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r, err := s.leases.Update(leadCtx, leaseKey, []byte(s.cfg.Name), rev)
			if err != nil {
				s.logger.Warn("lost the scheduler lease", slog.String("error", err.Error()))
				cancel()
				<-served
				return false
			}
			rev = r
		case err := <-served:
			s.release(rev)
			if ctx.Err() != nil {
				return false
			}
			s.logger.Warn("stopped serving timers; released the scheduler lease to compete again",
				slog.String("error", err.Error()), slog.Duration("backoff", restartBackoff))
			return true
		case <-ctx.Done():
			cancel()
			<-served
			s.release(rev)
			return false
		}
	}
}

// release deletes the lease if it is still the one this replica last wrote, at revision rev.
func (s *Scheduler) release(rev uint64) {
	ctx, stop := context.WithTimeout(context.Background(), time.Second)
	defer stop()
	_ = s.leases.Delete(ctx, leaseKey, jetstream.LastRevision(rev))
}

// pending is a timer known from the bucket.
type pending struct {
	key    string
	timer  core.Timer
	rev    uint64
	index  int
	firing bool
}

type timerHeap []*pending

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].timer.Due.Equal(h[j].timer.Due) {
		return h[i].timer.Due.Before(h[j].timer.Due)
	}
	return h[i].key < h[j].key
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *timerHeap) Push(x any)   { p := x.(*pending); p.index = len(*h); *h = append(*h, p) }
func (h *timerHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	*h = old[:len(old)-1]
	p.index = -1
	return p
}
func (h timerHeap) peek() *pending { return h[0] }

type firing struct {
	p   *pending
	rev uint64
	err error
}

// errWatchEnded reports that the timer watch closed its updates while the scheduler served.
var errWatchEnded = errors.New("the timer watch ended")

// serve watches the bucket and fires timers as they fall due, until ctx ends (it returns nil)
// or the watch cannot be opened or ends (it returns why).
func (s *Scheduler) serve(ctx context.Context) error {
	watch := s.watchTimers
	if watch == nil {
		watch = func(ctx context.Context) (jetstream.KeyWatcher, error) { return s.timers.WatchAll(ctx) }
	}
	w, err := watch(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("cannot watch timers: %w", err)
	}
	defer func() { _ = w.Stop() }()

	byKey := map[string]*pending{}
	var h timerHeap
	queue := make(chan firing, s.cfg.FireConcurrency)
	results := make(chan firing, s.cfg.FireConcurrency)
	var workers sync.WaitGroup
	for range s.cfg.FireConcurrency {
		workers.Go(func() {
			for f := range queue {
				f.err = s.fire(ctx, f.p.key, f.p.timer, f.rev)
				results <- f
			}
		})
	}
	defer func() { close(queue); workers.Wait() }()
	inflight := 0
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()

	for {
		// Hand every due timer to the fire workers, as far as they have room.
		now := time.Now()
		for h.Len() > 0 && !h.peek().timer.Due.After(now) && inflight < s.cfg.FireConcurrency {
			p := heap.Pop(&h).(*pending)
			p.firing = true
			inflight++
			queue <- firing{p: p, rev: p.rev}
		}
		next := time.Hour
		if h.Len() > 0 && inflight < s.cfg.FireConcurrency {
			next = time.Until(h.peek().timer.Due)
		}
		wake.Reset(next)

		select {
		case <-ctx.Done():
			return nil
		case <-wake.C:
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errWatchEnded
			}
			if e == nil {
				s.logger.Debug("timers loaded", slog.Int("pending", h.Len()))
				continue
			}
			s.apply(e, byKey, &h)
		case r := <-results:
			inflight--
			r.p.firing = false
			if r.err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.logger.Warn("firing a timer failed; retrying in 1s", slog.String("run_id", r.p.timer.RunID),
					slog.String("timer", r.p.timer.Key()), slog.String("error", r.err.Error()))
				if cur, ok := byKey[r.p.key]; ok && cur == r.p {
					retry := *r.p
					retry.timer.Due = time.Now().Add(time.Second)
					byKey[r.p.key] = &retry
					heap.Push(&h, &retry)
				}
			} else if cur, ok := byKey[r.p.key]; ok && cur == r.p {
				if cur.rev == r.rev {
					delete(byKey, r.p.key)
				} else {
					heap.Push(&h, cur) // re-registered while firing: fire again, it will be found moot
				}
			}
		}
	}
}

// apply folds one bucket change into the pending set.
func (s *Scheduler) apply(e jetstream.KeyValueEntry, byKey map[string]*pending, h *timerHeap) {
	cur, known := byKey[e.Key()]
	if e.Operation() != jetstream.KeyValuePut {
		if known {
			delete(byKey, e.Key())
			if cur.index >= 0 && !cur.firing {
				heap.Remove(h, cur.index)
			}
		}
		return
	}
	var t core.Timer
	if err := json.Unmarshal(e.Value(), &t); err != nil || t.RunID == "" {
		s.logger.Error("ignoring a malformed timer entry", slog.String("key", e.Key()))
		return
	}
	if known {
		cur.rev = e.Revision()
		if !cur.firing && cur.index >= 0 && !cur.timer.Due.Equal(t.Due) {
			cur.timer = t
			heap.Fix(h, cur.index)
		}
		return
	}
	p := &pending{key: e.Key(), timer: t, rev: e.Revision()}
	byKey[e.Key()] = p
	heap.Push(h, p)
}

// fire appends the timer's firing to its run (or finds it moot) and deletes the entry.
func (s *Scheduler) fire(ctx context.Context, key string, t core.Timer, rev uint64) error {
	firing := time.Now()
	if err := s.engine.Fire(ctx, t); err != nil && !errors.Is(err, core.ErrNotFound) && !errors.Is(err, core.ErrTerminal) {
		return err
	}
	s.fired.Add(1)
	lateness := firing.Sub(t.Due)
	metrics.TimerLateness(ctx, string(t.Kind), lateness.Seconds())
	s.logger.Debug("timer fired", slog.String("run_id", t.RunID), slog.String("timer", t.Key()),
		slog.Duration("lateness", lateness))
	if err := s.cfg.Faults.Hit(fault.AfterFireBeforeDelete); err != nil {
		return err // the entry stays; firing it again finds the timer moot and deletes it
	}
	err := s.timers.Delete(ctx, key, jetstream.LastRevision(rev))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		// Re-registered meanwhile (a repair): the new entry fires again and is found moot.
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) {
			return err
		}
	}
	return nil
}
