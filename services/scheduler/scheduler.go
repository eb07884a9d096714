// Package scheduler fires Flow's durable timers: waits (Sleep, WaitUntil) and retry backoffs.
//
// The history service registers every pending timer in the FLOW_TIMERS bucket, as it follows
// the history stream, and deletes each entry once a commit makes its timer moot: it is the
// bucket's one writer. The scheduler that holds the lease watches the bucket, keeps the pending
// timers in memory in due order (one goroutine for all of them, none per run), and when one
// falls due appends its firing event to the run's history (wait.fired or step.retry_fired) and
// sends the run's resume task as a fast path (the history service derives it too); the firing's
// commit makes the entry moot.
//
// The leader also follows the history stream's commits as they are published (a core NATS
// subscription), and so knows of a timer the moment its commit is made, however far behind the
// history service is; such a timer fires only once its run's history shows the commit, and its
// entry, when the history service writes it, is only forgotten. Timers falling due within
// PreloadWindow have their runs read ahead: the run's first and last commits, two direct gets,
// when the timer's event is the run's last (the firing is then one append right after it, at
// the expected sequence), else the run's snapshot. Up to FireConcurrency timers fire at once.
// A timer never fires before it is due.
//
// Nothing is missed across restarts: the bucket is durable, and a scheduler that starts fires
// every overdue timer at once, in due order. Firing twice never changes history: the core
// appends a firing only while the timer is pending in the run's history, at the expected
// sequence. Several replicas may run; one holds the lease in FLOW_LEASES and fires, the others
// wait to take over. Precision is that of the Go runtime timer, well under a second.
//
// The leader also times out step attempts whose heartbeat or start-to-close deadline passed
// (heartbeat.go): it watches FLOW_HEARTBEATS, which the workers alone write, and asks history.
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

	"github.com/flowrun/flow/internal/backend"
	"github.com/flowrun/flow/internal/batch"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/store"
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
	// FireConcurrency caps the timers being fired at once. Defaults to 256: a firing mostly
	// waits for its append's acknowledgement, which takes milliseconds on a loaded server.
	FireConcurrency int `envconfig:"FIRE_CONCURRENCY"`
	// PreloadWindow is how long before a timer falls due its run's snapshot is read into the
	// scheduler's cache, so that firing it is one append. Defaults to 1s; negative disables
	// preloading (each firing reads its run first).
	PreloadWindow time.Duration `envconfig:"SCHEDULER_PRELOAD_WINDOW"`
	// PreloadConcurrency caps the runs being preloaded at once. Defaults to 64.
	PreloadConcurrency int `envconfig:"SCHEDULER_PRELOAD_CONCURRENCY"`
	// PreloadMax caps the timers preloaded ahead of their deadline and not fired yet. A timer
	// whose event is its run's last keeps what the preload read of the run's first and last
	// commits (a few hundred bytes); another has its run's snapshot cached (see CacheSize).
	// Defaults to 50,000.
	PreloadMax int `envconfig:"SCHEDULER_PRELOAD_MAX"`
	// IgnoreCommits stops the leader from following the history stream's commits (a core NATS
	// subscription to flow.history.*) to learn of each timer the moment its commit is published,
	// before the history service writes its entry in FLOW_TIMERS. It then knows of timers only
	// from the bucket, as late as the history service is behind the stream.
	IgnoreCommits bool `envconfig:"SCHEDULER_IGNORE_COMMITS"`
	// CacheSize caps the run snapshots the scheduler keeps: the runs it fired timers of, and
	// those preloaded whose timer's event is not their last. Defaults to 10,000.
	CacheSize int `envconfig:"SCHEDULER_CACHE_SIZE"`
	// Streams sizes Flow's streams, created or updated at start; Streams.LeaseTTL is how long a
	// dead leader holds the lease before a standby takes over.
	Streams streams.Config `envconfig:"STREAMS"`
	// Logger defaults to slog.Default().
	Logger *slog.Logger `ignored:"true"`
	// Faults injects failures between writes, for tests. Defaults to nil (none).
	Faults *fault.Injector `ignored:"true"`
	// NoAdmission stops this replica from competing for the admission lease: it fires timers
	// only, and another replica admits runs under flow control. Defaults to false.
	NoAdmission bool `envconfig:"SCHEDULER_NO_ADMISSION"`
	// AdmitBatch bounds the runs one admission round admits of a group. Defaults to 256.
	AdmitBatch int `envconfig:"SCHEDULER_ADMIT_BATCH"`
	// ReconcileInterval is how often the admission controller checks every flow-control slot
	// held against the runs index, releasing the slot of a run whose end it missed (a repair,
	// counted in flow_repairs_total). Defaults to 30s.
	ReconcileInterval time.Duration `envconfig:"SCHEDULER_RECONCILE_INTERVAL"`
	// NoSchedules stops this replica from competing for the schedules lease: another replica
	// fires the schedules of FLOW_SCHEDULES (docs/schedules.md). Defaults to false.
	NoSchedules bool `envconfig:"SCHEDULER_NO_SCHEDULES"`
	// SchedulePoll is how often a schedule whose runs are active (or whose actions, buffered by
	// its overlap policy, wait for them to end), or whose last round failed, is looked at
	// again: a run that ended leaves the schedule's running list within it. Defaults to 1s.
	SchedulePoll time.Duration `envconfig:"SCHEDULER_SCHEDULE_POLL"`
	// NoBatches stops this replica from competing for the batch lease: another replica
	// executes the batch jobs (docs/batch.md). Defaults to false.
	NoBatches bool `envconfig:"SCHEDULER_NO_BATCHES"`
	// BatchConcurrency bounds the batch jobs executed at once; the others wait. Defaults to 4.
	BatchConcurrency int `envconfig:"SCHEDULER_BATCH_CONCURRENCY"`
	// BatchWindow is the number of a job's targets whose results one write of its progress
	// records: a crash repeats at most that many operations (each a no-op the second time).
	// Defaults to 100.
	BatchWindow int `envconfig:"SCHEDULER_BATCH_WINDOW"`
	// BatchOpConcurrency bounds a job's operations in flight at once, under its rate. Defaults
	// to 16.
	BatchOpConcurrency int `envconfig:"SCHEDULER_BATCH_OP_CONCURRENCY"`
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
	history jetstream.Stream
	store   *jsstore.Store
	engine  *engine.Engine
	// watchTimers opens the watch on FLOW_TIMERS; nil means s.timers.WatchAll. Tests replace it.
	watchTimers func(context.Context) (jetstream.KeyWatcher, error)
	// watchBeats opens the watch on FLOW_HEARTBEATS; nil means s.heartbeats.WatchAll. Tests
	// replace it.
	watchBeats func(context.Context) (jetstream.KeyWatcher, error)

	// probes serves /healthz, /readyz and /metrics (nil when off); readiness follows Start and Stop.
	probes    *health.Server
	readiness health.State

	leader atomic.Bool
	fired  atomic.Int64
	// pendingTimers is the number of timers the leader keeps pending; seenEntries counts the
	// timer entries its watch brought (for tests).
	pendingTimers, seenEntries atomic.Int64
	// hints counts the timers learnt of from their commits before their entries, and
	// unconfirmed those of them dropped because their runs' tails did not show their commits.
	hints, unconfirmed atomic.Int64
	// following is set while the leader follows the history stream's commits.
	following atomic.Bool
	// limits and queue are the flow-control state and the admission queue; admitting is set
	// while this replica holds the admission lease; admitted and cancelledByControl count its
	// admissions and the runs its policies cancelled. admitDone closes when admission stops.
	limits *limits.Store
	queue  jetstream.KeyValue
	// runs is the runs index (FLOW_RUNS), read by the admission controller for the ends of the
	// runs holding slots.
	runs               jetstream.KeyValue
	admitting          atomic.Bool
	admitted           atomic.Int64
	cancelledByControl atomic.Int64
	admitDone          chan struct{}
	// heartbeats is FLOW_HEARTBEATS, which the heartbeat watcher follows (and never writes)
	// while this replica leads (heartbeat.go); timedOut counts the attempts it timed out,
	// beatChecks the passed deadlines it checked against history; checked is the watcher's
	// record of the entries it checked, kept across its watches.
	heartbeats jetstream.KeyValue
	timedOut   atomic.Int64
	beatChecks atomic.Int64
	checked    checkedBeats
	// js and batches are JetStream and FLOW_BATCHES; batching is set while this replica holds
	// the batch lease; batchDone closes when the batch executor stops.
	js        jetstream.JetStream
	batches   *batch.Store
	batching  atomic.Bool
	batchDone chan struct{}
	cancel    context.CancelFunc
	// schedules fires the schedules while firingSchedules (schedule.go); scheduleActions
	// counts the effects its rounds stored.
	schedules       *scheduleRunner
	firingSchedules atomic.Bool
	scheduleActions atomic.Int64
	done            chan struct{}
	started         chan struct{}
	once            sync.Once

	// scheduleDoor and batchDoor are set while this replica serves the doors of FLOW_SCHEDULES
	// and FLOW_BATCHES (door.go).
	scheduleDoor, batchDoor atomic.Bool
}

// New returns a scheduler.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), nuid.Next()[:6])
	}
	if cfg.FireConcurrency == 0 {
		cfg.FireConcurrency = 256
	}
	if cfg.FireConcurrency < 0 {
		return nil, fmt.Errorf("scheduler: FireConcurrency must be positive, got %d", cfg.FireConcurrency)
	}
	if cfg.PreloadWindow == 0 {
		cfg.PreloadWindow = time.Second
	}
	if cfg.PreloadConcurrency == 0 {
		cfg.PreloadConcurrency = 64
	}
	if cfg.PreloadConcurrency < 0 {
		return nil, fmt.Errorf("scheduler: PreloadConcurrency must be positive, got %d", cfg.PreloadConcurrency)
	}
	if cfg.PreloadMax == 0 {
		cfg.PreloadMax = 50_000
	}
	if cfg.PreloadMax < 0 {
		return nil, fmt.Errorf("scheduler: PreloadMax must be positive, got %d", cfg.PreloadMax)
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = 10_000
	}
	if cfg.CacheSize < 0 {
		return nil, fmt.Errorf("scheduler: CacheSize must be positive, got %d", cfg.CacheSize)
	}
	if cfg.Streams.LeaseTTL == 0 {
		cfg.Streams.LeaseTTL = 10 * time.Second
	}
	if cfg.AdmitBatch == 0 {
		cfg.AdmitBatch = AdmitBatchDefault
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = 30 * time.Second
	}
	if cfg.ReconcileInterval < 0 {
		return nil, fmt.Errorf("scheduler: ReconcileInterval must be positive, got %s", cfg.ReconcileInterval)
	}
	if cfg.AdmitBatch < 0 {
		return nil, fmt.Errorf("scheduler: AdmitBatch must be positive, got %d", cfg.AdmitBatch)
	}
	if cfg.BatchConcurrency == 0 {
		cfg.BatchConcurrency = 4
	}
	if cfg.BatchConcurrency < 0 || cfg.BatchWindow < 0 || cfg.BatchOpConcurrency < 0 {
		return nil, fmt.Errorf("scheduler: BatchConcurrency, BatchWindow and BatchOpConcurrency must be positive, got %d, %d and %d",
			cfg.BatchConcurrency, cfg.BatchWindow, cfg.BatchOpConcurrency)
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
		done: make(chan struct{}), started: make(chan struct{}), admitDone: make(chan struct{}), batchDone: make(chan struct{})}, nil
}

// Start connects, creates Flow's streams if needed, and starts competing for the lease.
func (s *Scheduler) Start(ctx context.Context) error {
	var err error
	if s.nc, s.ownConn, err = s.cfg.NATS.As(natsconn.RoleScheduler).Use(s.cfg.Conn, "flow-scheduler"); err != nil {
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
	if s.cfg.NoAdmission {
		close(s.admitDone)
	} else {
		go s.runAdmission(runCtx)
	}
	s.schedules = s.startSchedules(runCtx)
	if s.cfg.NoBatches {
		close(s.batchDone)
	} else {
		go s.runBatches(runCtx)
	}
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
	if s.history, err = js.Stream(ctx, streams.History); err != nil {
		return err
	}
	if s.queue, err = js.KeyValue(ctx, streams.QueueBucket); err != nil {
		return err
	}
	if s.runs, err = js.KeyValue(ctx, streams.RunsBucket); err != nil {
		return err
	}
	if s.limits, err = limits.Open(ctx, js); err != nil {
		return err
	}
	if s.heartbeats, err = js.KeyValue(ctx, streams.HeartbeatsBucket); err != nil {
		return err
	}
	s.js = js
	if s.batches, err = batch.Open(ctx, js); err != nil {
		return err
	}
	// The history service derives every resume task the scheduler sends; the scheduler's copy
	// is a fast path, sent as soon as the firing is committed, and no firing waits for its ack.
	// A timer of a run this scheduler does not hold reads its checkpoint and the tail only.
	// The batch jobs' resets hold their workflows' reset locks, entries of the start key index,
	// which the history service writes, asked over request/reply.
	be, err := backend.Open(ctx, js, backend.Role{Source: "flow/scheduler", Logger: s.logger, Faults: s.cfg.Faults, HostFaults: s.cfg.Faults, AsyncTasks: true, Checkpoints: true},
		engine.Config{CacheSize: s.cfg.CacheSize, Keys: jshost.NewRemoteStartKeys(s.nc)})
	if err != nil {
		return err
	}
	s.store, s.engine = be.Store, be.Engine
	return err
}

// Leader reports whether this replica holds the lease and fires timers.
func (s *Scheduler) Leader() bool { return s.leader.Load() }

// Admitting reports whether this replica holds the admission lease and admits runs.
func (s *Scheduler) Admitting() bool { return s.admitting.Load() }

// Admitted returns the number of runs this replica admitted.
func (s *Scheduler) Admitted() int64 { return s.admitted.Load() }

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
		<-s.admitDone
		s.schedules.wait()
		<-s.batchDone
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
	beats := make(chan struct{})
	go func() { defer close(beats); s.watchHeartbeats(leadCtx) }()
	defer func() { cancel(); <-beats }()
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

// pending is a timer known from the bucket, or from its commit only (rev 0: a hint, until the
// history service writes its entry).
type pending struct {
	key   string
	timer core.Timer
	rev   uint64
	// done is set once the timer's firing is committed or found moot, on a hint, while its entry
	// was written: only the entry is left to delete.
	done bool
	// due and ahead are its places in the heap of timers to fire and in the heap of timers to
	// preload, -1 when in neither.
	due, ahead int
	// preloaded is set once its run was handed to a preload, until it fires or goes.
	preloaded bool
	// tail is what the preload read of the run, when the run's last event is the one that
	// scheduled the timer: firing it then reads nothing (engine.FireOnTail).
	tail   *engine.RunTail
	firing bool
}

// timerHeap orders timers by due time (then key); at says which of a timer's places it keeps.
type timerHeap struct {
	items []*pending
	at    func(*pending) *int
}

func byDue(p *pending) *int   { return &p.due }
func byAhead(p *pending) *int { return &p.ahead }

func (h *timerHeap) Len() int { return len(h.items) }
func (h *timerHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if !a.timer.Due.Equal(b.timer.Due) {
		return a.timer.Due.Before(b.timer.Due)
	}
	return a.key < b.key
}
func (h *timerHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.at(h.items[i]), *h.at(h.items[j]) = i, j
}
func (h *timerHeap) Push(x any) {
	p := x.(*pending)
	*h.at(p) = len(h.items)
	h.items = append(h.items, p)
}
func (h *timerHeap) Pop() any {
	p := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	*h.at(p) = -1
	return p
}
func (h *timerHeap) peek() *pending { return h.items[0] }

// remove takes p out of h if it is there.
func (h *timerHeap) remove(p *pending) {
	if i := *h.at(p); i >= 0 {
		heap.Remove(h, i)
	}
}

// fix restores h's order after p's due time changed, if p is there.
func (h *timerHeap) fix(p *pending) {
	if i := *h.at(p); i >= 0 {
		heap.Fix(h, i)
	}
}

// firing is a timer handed to a fire worker: rev is its entry's revision (0 for a hint), and
// done says that only the entry is left to delete.
type firing struct {
	p    *pending
	rev  uint64
	done bool
	tail *engine.RunTail
	err  error
}

// preload asks a preload worker to read the run of timer t, pending p (which the worker does
// not touch), and comes back with the run's tail when it lets the timer fire without a read.
type preload struct {
	p    *pending
	t    core.Timer
	hint bool
	tail *engine.RunTail
}

// errWatchEnded reports that the timer watch closed its updates while the scheduler served.
var errWatchEnded = errors.New("the timer watch ended")

// timers is the leader's pending set: every timer of the bucket, by key, in the heap of timers
// to fire (due) until handed to a fire worker, and in the heap of timers to preload (ahead)
// until handed to a preload worker. It is owned by serve's goroutine.
type timers struct {
	byKey map[string]*pending
	due   timerHeap
	ahead timerHeap
	// preloaded counts the pending timers handed to a preload that have not fired yet: what
	// the scheduler keeps of their runs until they fire (bounded by PreloadMax).
	preloaded int
	// fired holds the timers fired on a hint whose entries have not been seen yet: an entry for
	// one of them is deleted without firing the timer again.
	fired firedSet
}

func newTimers() *timers {
	return &timers{byKey: map[string]*pending{}, due: timerHeap{at: byDue}, ahead: timerHeap{at: byAhead},
		fired: firedSet{m: map[string]core.Timer{}}}
}

// firedMax bounds the timers fired on a hint that the leader remembers until their entries come:
// one whose entry comes later is fired again when due, and found moot.
const firedMax = 100_000

// firedSet is a bounded set of timers by key, the oldest forgotten first.
type firedSet struct {
	m     map[string]core.Timer
	order []string
}

func (f *firedSet) add(key string, t core.Timer) {
	if len(f.order) >= firedMax {
		delete(f.m, f.order[0])
		f.order = f.order[1:]
	}
	f.m[key] = t
	f.order = append(f.order, key)
}

// take reports whether timer t was fired on a hint, and forgets it.
func (f *firedSet) take(key string, t core.Timer) bool {
	ft, ok := f.m[key]
	f.forget(key)
	return ok && sameTimer(ft, t)
}

// forget forgets the timer of key, if any.
func (f *firedSet) forget(key string) {
	delete(f.m, key) // its key stays in order until it is the oldest
}

// sameTimer reports whether a and b are the same timer of the same run.
func sameTimer(a, b core.Timer) bool {
	return a.RunID == b.RunID && a.Kind == b.Kind && a.ID == b.ID && a.Attempt == b.Attempt && a.Seq == b.Seq && a.Due.Equal(b.Due)
}

// add starts keeping p: to fire when due, and to preload before, unless only its entry is left
// to delete.
func (ts *timers) add(p *pending) {
	p.due, p.ahead = -1, -1
	ts.byKey[p.key] = p
	heap.Push(&ts.due, p)
	if !p.done {
		heap.Push(&ts.ahead, p)
	}
}

// forget stops keeping p (it fired, or its entry went).
func (ts *timers) forget(p *pending) {
	delete(ts.byKey, p.key)
	ts.due.remove(p)
	ts.ahead.remove(p)
	ts.unload(p)
}

// unload clears p's preloaded mark.
func (ts *timers) unload(p *pending) {
	if p.preloaded {
		p.preloaded = false
		ts.preloaded--
	}
}

// serve watches the bucket and fires timers as they fall due, until ctx ends (it returns nil)
// or the watch cannot be opened or ends (it returns why). Timers falling due within the
// preload window have their runs read into the engine's cache ahead of time (Engine.Preload),
// so that firing one is a single append; a timer fires when it is due, never before, whether
// its preload finished or not.
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
	hints := make(chan core.Timer, hintBuffer)
	if !s.cfg.IgnoreCommits {
		sub, err := s.nc.Subscribe(streams.HistorySubject("*"), func(m *nats.Msg) {
			if t, ok := hintOf(m); ok {
				select {
				case hints <- t:
				default: // a hint only: the timer's entry still comes
				}
			}
		})
		if err == nil {
			// Once the server knows of the subscription, every commit published reaches it.
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = s.nc.FlushWithContext(fctx)
			cancel()
		}
		if err != nil {
			if sub != nil {
				_ = sub.Unsubscribe()
			}
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("cannot follow the history stream's commits: %w", err)
		}
		s.following.Store(true)
		defer func() { s.following.Store(false); _ = sub.Unsubscribe() }()
	}

	ts := newTimers()
	fireCap, preloadCap, aheadCap := s.cfg.FireConcurrency, s.cfg.PreloadConcurrency, s.cfg.PreloadMax
	window := s.cfg.PreloadWindow
	if window < 0 {
		preloadCap = 0
	}
	queue := make(chan firing, fireCap)
	results := make(chan firing, fireCap)
	preloads := make(chan preload, max(preloadCap, 1))
	preloaded := make(chan preload, max(preloadCap, 1))
	var workers sync.WaitGroup
	for range fireCap {
		workers.Go(func() {
			for f := range queue {
				f.err = s.fire(ctx, f.p.timer, f)
				results <- f
			}
		})
	}
	for range preloadCap {
		workers.Go(func() {
			for job := range preloads {
				job.tail = s.preload(ctx, job.t, job.hint)
				preloaded <- job
			}
		})
	}
	defer func() { close(queue); close(preloads); workers.Wait() }()
	inflight, preloading := 0, 0
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()

	for {
		s.pendingTimers.Store(int64(len(ts.byKey)))
		now := time.Now()
		// Hand every due timer to the fire workers, as far as they have room.
		for ts.due.Len() > 0 && !ts.due.peek().timer.Due.After(now) && inflight < fireCap {
			p := heap.Pop(&ts.due).(*pending)
			ts.ahead.remove(p)
			ts.unload(p)
			p.firing = true
			inflight++
			queue <- firing{p: p, rev: p.rev, done: p.done, tail: p.tail}
		}
		// Read ahead the runs of the timers that fall due within the window, as far as the
		// preload workers have room and PreloadMax allows.
		horizon := now.Add(window)
		for ts.ahead.Len() > 0 && !ts.ahead.peek().timer.Due.After(horizon) && preloading < preloadCap && ts.preloaded < aheadCap {
			p := heap.Pop(&ts.ahead).(*pending)
			p.preloaded = true
			ts.preloaded++
			preloading++
			preloads <- preload{p: p, t: p.timer, hint: p.rev == 0}
		}
		next := time.Hour
		if ts.due.Len() > 0 && inflight < fireCap {
			next = time.Until(ts.due.peek().timer.Due)
		}
		if ts.ahead.Len() > 0 && preloading < preloadCap && ts.preloaded < aheadCap {
			next = min(next, time.Until(ts.ahead.peek().timer.Due.Add(-window)))
		}
		wake.Reset(next)

		select {
		case <-ctx.Done():
			return nil
		case <-wake.C:
		case r := <-preloaded:
			preloading--
			if cur, ok := ts.byKey[r.p.key]; ok && cur == r.p && !cur.firing && cur.timer == r.t {
				cur.tail = r.tail
			}
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errWatchEnded
			}
			if e == nil {
				s.logger.Debug("timers loaded", slog.Int("pending", len(ts.byKey)))
				continue
			}
			s.seenEntries.Add(1)
			s.apply(e, ts)
		case t := <-hints:
			key := jshost.TimerKey(t)
			_, known := ts.byKey[key]
			if _, fired := ts.fired.m[key]; !known && !fired {
				s.hints.Add(1)
				ts.add(&pending{key: key, timer: t})
			}
		case r := <-results:
			inflight--
			r.p.firing = false
			cur, ok := ts.byKey[r.p.key]
			switch {
			case !ok || cur != r.p:
			case r.rev == 0 && r.err != nil:
				// A hint that its run's tail did not confirm (a commit the stream refused, or a
				// run that moved on), or whose firing failed: left to its entry, if it comes.
				if errors.Is(r.err, errUnconfirmed) {
					s.unconfirmed.Add(1)
				} else if ctx.Err() == nil {
					s.logger.Debug("firing a timer on its commit failed; its entry fires it", slog.String("run_id", r.p.timer.RunID),
						slog.String("timer", r.p.timer.Key()), slog.String("error", r.err.Error()))
				}
				if cur.rev == 0 {
					ts.forget(cur)
				} else {
					heap.Push(&ts.due, cur) // the entry came meanwhile
				}
			case r.err != nil:
				if ctx.Err() != nil {
					return nil
				}
				s.logger.Warn("firing a timer failed; retrying in 1s", slog.String("run_id", r.p.timer.RunID),
					slog.String("timer", r.p.timer.Key()), slog.String("error", r.err.Error()))
				retry := &pending{key: r.p.key, timer: r.p.timer, rev: r.p.rev, done: r.p.done}
				retry.timer.Due = time.Now().Add(time.Second)
				ts.forget(r.p)
				ts.add(retry)
			case r.rev == 0:
				// Fired (or found moot) on a hint: the entry, once written, is only deleted.
				if cur.rev == 0 {
					ts.forget(cur)
					ts.fired.add(cur.key, cur.timer)
				} else {
					cur.done = true
					heap.Push(&ts.due, cur)
				}
			case cur.rev == r.rev:
				ts.forget(cur)
			default:
				heap.Push(&ts.due, cur) // re-registered while firing: fire again, it will be found moot
			}
		}
	}
}

// apply folds one bucket change into the pending set.
func (s *Scheduler) apply(e jetstream.KeyValueEntry, ts *timers) {
	cur, known := ts.byKey[e.Key()]
	if e.Operation() != jetstream.KeyValuePut {
		if known {
			// A firing in flight finishes; its result finds the timer gone.
			ts.forget(cur)
		}
		ts.fired.forget(e.Key())
		return
	}
	var t core.Timer
	if err := json.Unmarshal(e.Value(), &t); err != nil || t.RunID == "" {
		s.logger.Error("ignoring a malformed timer entry", slog.String("key", e.Key()))
		return
	}
	if known {
		cur.rev = e.Revision()
		if !cur.firing && !cur.timer.Due.Equal(t.Due) {
			cur.timer = t
			ts.due.fix(cur)
			ts.ahead.fix(cur)
		}
		return
	}
	// An entry whose timer fired on its commit's hint already is only forgotten.
	ts.add(&pending{key: e.Key(), timer: t, rev: e.Revision(), done: ts.fired.take(e.Key(), t)})
}

// preload reads ahead what firing timer t will need: the run's tail when the timer's event is
// the run's last (the firing then reads nothing), else, for a timer with an entry, the run's
// snapshot, into the engine's cache. It returns the tail, or nil. A failed preload only means
// that the firing reads.
func (s *Scheduler) preload(ctx context.Context, t core.Timer, hint bool) *engine.RunTail {
	tail, err := s.readTail(ctx, t.RunID)
	if err == nil {
		if tail.Fires(t) {
			return &tail
		}
		if hint {
			return nil // the firing confirms it
		}
		err = s.engine.Preload(ctx, t)
	}
	if err != nil && ctx.Err() == nil {
		s.logger.Debug("preloading a timer's run failed; firing it reads the run", slog.String("run_id", t.RunID),
			slog.String("timer", t.Key()), slog.String("error", err.Error()))
	}
	return nil
}

// errUnconfirmed reports a hint that its run's tail does not confirm.
var errUnconfirmed = errors.New("the timer's commit is not its run's last")

// fire appends the timer's firing to its run, or finds it moot. With the run's tail, as
// preloaded, it reads nothing unless the run moved on since. A hint (no entry, f.rev 0) fires
// only on a tail that shows its commit; an entry whose timer fired on its hint (f.done) is only
// forgotten. The scheduler never writes the timer index: the history service, its one writer,
// deletes an entry once the firing's commit (or anything else) makes its timer moot.
func (s *Scheduler) fire(ctx context.Context, t core.Timer, f firing) error {
	firing := time.Now()
	tail := f.tail
	var err error
	if f.done {
		return nil
	}
	if t.Kind == core.TimerStepStart {
		// A schedule-to-start timer is moot once a worker recorded the attempt's start.
		started, serr := s.attemptStarted(ctx, t)
		if serr != nil || started {
			return serr
		}
	}
	switch {
	case f.rev == 0:
		if tail == nil || !tail.Fires(t) {
			if tail, err = s.confirm(ctx, t); err != nil {
				return err
			}
		}
		err = s.engine.FireOnTail(ctx, t, *tail)
	case tail != nil:
		err = s.engine.FireOnTail(ctx, t, *tail)
	default:
		// Not preloaded (yet): the run's tail is two direct gets, where reading its history
		// scans every message of the runs committed in between.
		if rt, rerr := s.readTail(ctx, t.RunID); rerr == nil && rt.Fires(t) {
			err = s.engine.FireOnTail(ctx, t, rt)
		} else {
			err = s.engine.Fire(ctx, t)
		}
	}
	if err != nil && !errors.Is(err, core.ErrNotFound) && !errors.Is(err, core.ErrTerminal) && !errors.Is(err, store.ErrDeleted) {
		return err
	}
	s.fired.Add(1)
	lateness := firing.Sub(t.Due)
	metrics.TimerLateness(ctx, string(t.Kind), lateness.Seconds())
	s.logger.Debug("timer fired", slog.String("run_id", t.RunID), slog.String("timer", t.Key()),
		slog.Duration("lateness", lateness))
	return nil
}
