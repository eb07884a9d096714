// Package scheduler hosts Flow's background jobs that the scheduler role runs, each a small type
// that owns its state, counters and goroutines, run through a lease of FLOW_LEASES
// (internal/maintenance) so that the replica holding the lease runs it and the others wait to
// take over:
//
//   - the timer firer (timers.go), under the "scheduler" lease: fires the durable timers of
//     FLOW_TIMERS (waits, retry backoffs, delayed starts, schedule-to-start timeouts), which the
//     history service writes;
//   - the heartbeat watcher (heartbeat.go), under the same lease: times out the step attempts
//     whose heartbeat or start-to-close deadline passed, from FLOW_HEARTBEATS, which the workers
//     write;
//   - the admission controller (admit.go), under the "admission" lease: admits the runs under
//     flow control waiting in FLOW_QUEUE (the history service's), the one writer of FLOW_LIMITS;
//   - the batch executor (batch.go), under the "batch" lease: the one writer of FLOW_BATCHES,
//     which executes the batch jobs;
//   - the schedule runner (schedule.go), under the "schedules" lease: the one writer of
//     FLOW_SCHEDULES, which fires the schedules.
//
// Each job writes the runs' histories through the engine only, at the expected sequence, so
// that two leaders overlapping for a moment are harmless. The Scheduler connects, opens the
// buckets' repositories, wires the engine, and runs the leases; Config.NoAdmission, NoSchedules
// and NoBatches keep a replica out of a lease. Retention, which purges streams, is the history
// service's job (services/history), under the same lease loop.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/backend"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/batch"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/heartbeats"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/internal/maintenance"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/runsindex"
	"github.com/flowrun/flow/internal/schedule/schedstore"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/timerindex"
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
	// HandOffGrace is how long the scheduler leaves a run's own timer (a wait, a step retry
	// backoff) to the run's workers once it falls due: it sends the run a resume task at the
	// due time, and a worker fires the timer and takes the decision it allows in one commit.
	// Once the grace period has passed with the timer still pending, the scheduler fires it
	// itself unless a task of the run still waits in FLOW_TASKS (whichever worker takes that
	// task fires the timer); it looks again after twice the period, and so on up to a minute.
	// Defaults to 5s; negative makes the scheduler fire every timer itself when due.
	HandOffGrace time.Duration `envconfig:"SCHEDULER_HANDOFF_GRACE"`
	// PreloadConcurrency caps the runs being preloaded at once. Defaults to 64.
	PreloadConcurrency int `envconfig:"SCHEDULER_PRELOAD_CONCURRENCY"`
	// PreloadMax caps the timers preloaded ahead of their deadline and not fired yet. A timer
	// whose event is its run's last keeps what the preload read of the run's first and last
	// commits (a few hundred bytes); another has its run's snapshot cached (see CacheSize).
	// Defaults to 50,000.
	PreloadMax int `envconfig:"SCHEDULER_PRELOAD_MAX"`
	// IgnoreCommits stops the leader from following the history stream's commits (a core NATS
	// subscription to flow.history.>) to learn of each timer the moment its commit is published,
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

// leaseKey is the key in FLOW_LEASES of the timer firer and the heartbeat watcher, which run
// together.
const leaseKey = "scheduler"

// Scheduler hosts the scheduler role's background jobs. Start it once; Stop it once.
type Scheduler struct {
	cfg    Config
	logger *slog.Logger

	nc      *nats.Conn
	ownConn bool
	js      jetstream.JetStream
	// tasks is FLOW_TASKS, where the timer firer looks for a handed-off timer's task.
	tasks  jetstream.Stream
	store  *jsstore.Store
	engine *engine.Engine
	// The repositories of the buckets the jobs read and write, opened by open. runs is the
	// runs index (FLOW_RUNS), the history service's.
	leases     *maintenance.Leases
	timerIndex *timerindex.Index
	beatStore  *heartbeats.Store
	queue      *limits.Queue
	limits     *limits.Store
	batchStore *batch.Store
	schedStore *schedstore.Store
	runs       *runsindex.Store

	// probes serves /healthz, /readyz and /metrics (nil when off); readiness follows Start and Stop.
	probes    *health.Server
	readiness health.State

	// The jobs, made by New and wired by wire.
	timers    *timerFirer
	beats     *heartbeatWatcher
	admission *admissionController
	batches   *batchExecutor
	schedules *scheduleRunner
	// The leases they run under: the timers' (with the heartbeat watcher), admission's, the
	// batch executor's and the schedule runner's.
	timerLease, admissionLease, batchLease, schedulesLease *maintenance.Lease

	cancel  context.CancelFunc
	jobs    sync.WaitGroup
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
		cfg.FireConcurrency = 256
	}
	if cfg.FireConcurrency < 0 {
		return nil, fmt.Errorf("scheduler: FireConcurrency must be positive, got %d", cfg.FireConcurrency)
	}
	if cfg.HandOffGrace == 0 {
		cfg.HandOffGrace = 5 * time.Second
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
	logger = logger.With(slog.String("component", "scheduler"), slog.String("replica", cfg.Name))
	s := &Scheduler{cfg: cfg, logger: logger, started: make(chan struct{})}
	s.timers = newTimerFirer(cfg, logger)
	s.beats = &heartbeatWatcher{logger: logger}
	s.admission = &admissionController{logger: logger, faults: cfg.Faults, batch: cfg.AdmitBatch, reconcileInterval: cfg.ReconcileInterval}
	s.batches = &batchExecutor{logger: logger, faults: cfg.Faults, name: cfg.Name, concurrency: cfg.BatchConcurrency,
		window: cfg.BatchWindow, opConcurrency: cfg.BatchOpConcurrency}
	s.schedules = newScheduleRunner(cfg, logger)
	lease := func(key, role, doing string) *maintenance.Lease {
		return &maintenance.Lease{Key: key, Holder: cfg.Name, Role: role, Doing: doing, TTL: cfg.Streams.LeaseTTL,
			Backoff: restartBackoff, Logger: logger}
	}
	s.timerLease = lease(leaseKey, "scheduler", "serving timers")
	s.admissionLease = lease(admissionLease, "admission controller", "admitting runs")
	s.batchLease = lease(batchLease, "batch executor", "executing batch jobs")
	// An injected fault "kills" the batch executor: it stops competing without releasing its
	// lease, and a standby takes over once the lease expires, as after a crash.
	s.batchLease.Dies = func(err error) bool { return errors.Is(err, fault.ErrInjected) }
	s.schedulesLease = lease(schedulesLease, "schedule runner", "firing schedules")
	return s, nil
}

// Start connects, creates Flow's streams if needed, and starts competing for the leases of the
// jobs this replica may run.
func (s *Scheduler) Start(ctx context.Context) error {
	var err error
	if s.nc, s.ownConn, err = s.cfg.NATS.As(natsconn.RoleScheduler).Use(s.cfg.Conn, "flow-scheduler"); err != nil {
		return err
	}
	err = s.open(ctx)
	if err == nil {
		s.wire()
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
	// The heartbeat watcher runs beside the timer firer, under its lease; the lease goes when
	// the timer firer fails, the watcher restarting its own watch.
	s.runJob(runCtx, s.timerLease, maintenance.JobFunc(func(ctx context.Context) error {
		var beats sync.WaitGroup
		defer beats.Wait()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		beats.Go(func() { _ = s.beats.Run(ctx) })
		return s.timers.Run(ctx)
	}))
	if !s.cfg.NoAdmission {
		s.runJob(runCtx, s.admissionLease, s.admission)
	}
	if !s.cfg.NoSchedules {
		s.runJob(runCtx, s.schedulesLease, s.schedules)
	}
	if !s.cfg.NoBatches {
		s.runJob(runCtx, s.batchLease, s.batches)
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
	if s.timerIndex, err = timerindex.Open(ctx, js); err != nil {
		return err
	}
	if s.leases, err = maintenance.OpenLeases(ctx, js); err != nil {
		return err
	}
	if s.tasks, err = js.Stream(ctx, streams.Tasks); err != nil {
		return err
	}
	if s.queue, err = limits.OpenQueue(ctx, js); err != nil {
		return err
	}
	if s.runs, err = runsindex.Open(ctx, js); err != nil {
		return err
	}
	if s.limits, err = limits.Open(ctx, js); err != nil {
		return err
	}
	if s.beatStore, err = heartbeats.Open(ctx, js); err != nil {
		return err
	}
	s.js = js
	if s.batchStore, err = batch.Open(ctx, js); err != nil {
		return err
	}
	if s.schedStore, err = schedstore.Open(ctx, js); err != nil {
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

// wire hands each job what open opened: the connection, the repositories of the buckets it
// reads and writes, the store and the engine. A job reaches no other bucket.
func (s *Scheduler) wire() {
	s.timers.wire(s.nc, s.timerIndex, s.beatStore, s.tasks, s.store, s.engine)
	s.beats.wire(s.beatStore, s.engine)
	s.admission.wire(s.queue, s.limits, s.runs, s.engine)
	s.batches.wire(s.nc, s.js, s.batchStore, s.engine)
	s.schedules.wire(s.nc, s.js, s.schedStore, s.runs, s.store, s.engine)
	for _, l := range []*maintenance.Lease{s.timerLease, s.admissionLease, s.batchLease, s.schedulesLease} {
		l.Leases = s.leases
	}
}

// runJob runs job under lease l until ctx ends (or the job dies); Stop waits for it.
func (s *Scheduler) runJob(ctx context.Context, l *maintenance.Lease, job maintenance.Job) {
	s.jobs.Go(func() { l.Run(ctx, job) })
}

// unlessStopped is what a job's Run returns for err: nil once ctx has ended (the job was
// stopped or lost its lease, and err follows from that), err otherwise.
func unlessStopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Leader reports whether this replica holds the scheduler's lease and fires timers.
func (s *Scheduler) Leader() bool { return s.timerLease.Leading() }

// Fired returns the number of timers this replica fired.
func (s *Scheduler) Fired() int64 { return s.timers.Fired() }

// HandedOff returns the number of waits and retry backoffs this replica handed to their runs'
// workers when they fell due (Config.HandOffGrace); each is counted in Fired too if the
// scheduler fired it after the grace period.
func (s *Scheduler) HandedOff() int64 { return s.timers.HandedOff() }

// Stop stops every job, releases their leases so that a standby takes over at once, and waits.
// It is idempotent and safe before Start.
func (s *Scheduler) Stop() error {
	s.once.Do(func() {
		select {
		case <-s.started:
		default:
			return
		}
		s.readiness.Stopping()
		s.cancel()
		s.jobs.Wait()
		if s.ownConn {
			s.nc.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.probes.Shutdown(ctx)
	})
	return nil
}

// restartBackoff is how long a replica whose job failed (its watch ended) waits, without the
// job's lease, before it competes again: long enough not to spin on a watch that keeps failing,
// short enough that timers fire on time once the watch works again, here or in a standby.
const restartBackoff = time.Second
