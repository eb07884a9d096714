// Package worker hosts Flow's replay loop: it pulls resume tasks for its queue from the
// FLOW_TASKS work queue, drives each run (decisions, step attempts, retries, timers, hooks,
// children) and acknowledges a task only once the run is suspended, blocked or ended. A worker
// that dies loses nothing: its unacknowledged tasks come back after AckWait and another worker
// continues each run from its history.
//
// Run the workflows of a registry:
//
//	w, err := worker.New(worker.Config{Queue: "orders"}, reg)
//	if err := w.Start(ctx); err != nil { ... }
//	defer w.Stop(context.Background())
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowrun/flow/internal/backend"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/definitions"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/liveness"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/parked"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/internal/wait"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// Config configures a Worker. The zero value works against a local `flow dev`. Load it from the
// environment with envconfig.Process("FLOW", &cfg): FLOW_NATS_URL, FLOW_QUEUE, ...
type Config struct {
	// NATS says how to connect when Conn is nil: servers, credentials, TLS, or a nats CLI
	// context, from FLOW_NATS_URL, FLOW_NATS_CREDS, FLOW_NATS_NKEY, FLOW_NATS_TLS_CA,
	// FLOW_NATS_TLS_CERT, FLOW_NATS_TLS_KEY, FLOW_NATS_CONTEXT and the nats CLI's NATS_URL, ... (see
	// natsconn.Config and docs/operations.md). Defaults to nats://127.0.0.1:4222 when neither
	// the environment nor a nats context says otherwise.
	NATS natsconn.Config `envconfig:"NATS"`
	// Conn is an existing connection to use instead of dialling with NATS. The worker does not
	// close it.
	Conn *nats.Conn `ignored:"true"`
	// Queue is the task queue the worker serves. Defaults to "default".
	Queue string `envconfig:"QUEUE"`
	// RunConcurrency caps the runs driven at once. Defaults to 64.
	RunConcurrency int `envconfig:"RUN_CONCURRENCY"`
	// StepConcurrency caps the step attempts running at once. Defaults to 64, as many as
	// RunConcurrency's default: fewer slots than runs make a run's next step wait for another
	// run's (docs/performance.md, "Knobs"). Lower it when steps are CPU-bound.
	StepConcurrency int `envconfig:"STEP_CONCURRENCY"`
	// SerialCommits makes each run wait for its commit's acknowledgement before it goes on.
	// Defaults to false: a run's commits are pipelined, one append in flight and the results
	// and decisions recorded meanwhile appended as one commit after it (docs/performance.md).
	SerialCommits bool `envconfig:"SERIAL_COMMITS"`
	// HoldTimers is how long before one of its run's timers (a sleep, a retry backoff) falls
	// due a drive that would end keeps the run, and its task, and fires the timer itself when
	// due, in one commit with the decision that follows; it frees its run slot meanwhile. At
	// most HoldMax drives do so at once. Timers due later are handed to the run's workers by
	// the scheduler with a resume task when due. Defaults to 5s; negative never holds a run.
	HoldTimers time.Duration `envconfig:"HOLD_TIMERS"`
	// HoldMax caps the drives that keep their runs for a timer at once (HoldTimers), about 15
	// KiB of memory each. Each keeps its task unacknowledged (the task consumer allows 4 x
	// HoldMax more of them). Defaults to 10,000, as many as CacheSize's default.
	HoldMax int `envconfig:"HOLD_MAX"`
	// AckWait is how long a task may go without a heartbeat before NATS redelivers it to
	// another worker; a live worker sends heartbeats every AckWait/3 while it drives a run.
	// Defaults to 30 seconds.
	AckWait time.Duration `envconfig:"ACK_WAIT"`
	// CacheSize caps the run snapshots kept between tasks. Defaults to 10,000.
	CacheSize int `envconfig:"CACHE_SIZE"`
	// HTTPAddr is where GET /healthz, /readyz and /metrics are served, host:port; port 0 picks
	// a free one (see Worker.HTTPAddr); "off" disables them. Loaded with envconfig (as flowd
	// does) it defaults to 127.0.0.1:8423 (DefaultHTTPAddr). The zero value, as in a program
	// or a test that embeds a worker, serves no HTTP: many workers may share a process.
	HTTPAddr string `envconfig:"WORKER_HTTP_ADDR" default:"127.0.0.1:8423"`
	// SkipReplayCheck turns off replaying a run's whole history against the code when the
	// worker loads it cold. Defaults to false (check).
	SkipReplayCheck bool `envconfig:"SKIP_REPLAY_CHECK"`
	// Streams sizes Flow's streams, created or updated at start.
	Streams streams.Config `envconfig:"STREAMS"`
	// Logger defaults to slog.Default().
	Logger *slog.Logger `ignored:"true"`
	// Faults injects failures between writes, for tests. Defaults to nil (none).
	Faults *fault.Injector `ignored:"true"`
	// PayloadThreshold is the size in bytes above which a payload (a step's input or output,
	// a child's input, a run's output, a continue-as-new input...) is offloaded to the
	// FLOW_PAYLOADS object store, the history holding a reference (docs/large-payloads.md).
	// Keep it well below the server's max_payload (1 MiB by default). Defaults to 256 KiB.
	PayloadThreshold int `envconfig:"PAYLOAD_THRESHOLD"`
	// CheckpointEvery, negative, turns off reading snapshot checkpoints: a cold load of a run
	// then reads its whole history, not the latest checkpoint and the history after it. The
	// worker writes no checkpoints: the history service does, every FLOW_CHECKPOINT_EVERY events
	// (its Config.CheckpointEvery, docs/large-payloads.md); other values change nothing here.
	CheckpointEvery int `envconfig:"CHECKPOINT_EVERY"`
	// NoEagerStart makes the worker take no offers of new runs from the ingress (eager start,
	// eager.go): it drives new runs only from their tasks. Defaults to false: a worker with a
	// free run slot takes an offered run at once.
	NoEagerStart bool `envconfig:"NO_EAGER_START"`
}

// DefaultHTTPAddr is where flowd's worker serves its probes and metrics unless
// FLOW_WORKER_HTTP_ADDR says otherwise.
const DefaultHTTPAddr = "127.0.0.1:8423"

// Worker runs the workflows and steps of a registry. Start it once; Stop it once.
type Worker struct {
	cfg    Config
	reg    sdk.Runtime
	logger *slog.Logger

	nc      *nats.Conn
	ownConn bool
	engine  *engine.Engine
	// host publishes the tasks of runs taken from offers (eager.go).
	host *jshost.Host
	cons []jetstream.Consumer
	// pauses follows FLOW_PAUSES: the paused definitions and queues (pause.go).
	pauses *jshost.Pauses
	// id names the worker in FLOW_WORKERS and in the runs it parks (see liveness.NewID).
	id string
	// live tells which other workers serve a definition this one does not; pub keeps this
	// worker's own entry.
	live *liveness.View
	pub  *liveness.Publisher

	// probes serves /healthz, /readyz and /metrics (nil when off); readiness follows Start
	// and Stop.
	probes    *health.Server
	readiness health.State

	runCtx     context.Context
	cancelRuns context.CancelFunc
	inflight   sync.WaitGroup
	beat       time.Duration
	stopping   atomic.Bool
	fetchDone  chan struct{}
	started    chan struct{}
	stopOnce   sync.Once
	// unobserve unregisters the worker's observable gauge, once registered.
	unobserve func()
	// querySvc serves the queries of the runs it can run the code of (query.go); querySlots
	// caps the queries answered at once.
	querySvc   micro.Service
	querySlots chan struct{}
	// slots holds a token per run driven, from a task or an offer: at most RunConcurrency.
	slots chan struct{}
	// offerSubs take the offers of new runs (eager.go); offerMu is held to take one, and
	// taken by Stop once no more come; offersTaken counts those taken.
	offerSubs   []*nats.Subscription
	offerMu     sync.RWMutex
	offersTaken atomic.Int64
	// offered holds the drives of runs taken from offers, by run ID, under offeredMu.
	offeredMu sync.Mutex
	offered   map[string]*offered
}

// New returns a worker for the workflows and steps of reg.
func New(cfg Config, reg *flow.Registry) (*Worker, error) {
	if reg == nil {
		return nil, errors.New("worker: a registry is required")
	}
	if cfg.Queue == "" {
		cfg.Queue = streams.DefaultQueue
	}
	if cfg.RunConcurrency == 0 {
		cfg.RunConcurrency = 64
	}
	if cfg.StepConcurrency == 0 {
		cfg.StepConcurrency = 64
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.HoldTimers == 0 {
		cfg.HoldTimers = 5 * time.Second
	}
	if cfg.HoldMax == 0 {
		cfg.HoldMax = 10_000
	}
	switch {
	case cfg.HoldMax < 0:
		return nil, fmt.Errorf("worker: HoldMax must be positive, got %d", cfg.HoldMax)
	case cfg.RunConcurrency < 0:
		return nil, fmt.Errorf("worker: RunConcurrency must be positive, got %d", cfg.RunConcurrency)
	case cfg.StepConcurrency < 0:
		return nil, fmt.Errorf("worker: StepConcurrency must be positive, got %d", cfg.StepConcurrency)
	case cfg.AckWait < time.Second:
		return nil, fmt.Errorf("worker: AckWait must be at least 1s, got %s", cfg.AckWait)
	}
	if err := health.CheckAddr(cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("worker: HTTPAddr (FLOW_WORKER_HTTP_ADDR) %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Worker{cfg: cfg, reg: sdk.RuntimeOf(reg), logger: logger.With(slog.String("component", "worker"), slog.String("queue", cfg.Queue)),
		fetchDone: make(chan struct{}), started: make(chan struct{}), offered: map[string]*offered{}}, nil
}

// Start connects, creates Flow's streams if needed, registers the definitions it runs (its
// FLOW_WORKERS entry, kept alive until Stop, and FLOW_DEFINITIONS), and starts pulling tasks. It
// returns once the worker is consuming.
func (w *Worker) Start(ctx context.Context) error {
	var err error
	if w.nc, w.ownConn, err = w.cfg.NATS.As(natsconn.RoleWorker).Use(w.cfg.Conn, "flow-worker"); err != nil {
		return err
	}
	if err := w.start(ctx); err != nil {
		if w.pub != nil {
			_ = w.pub.Stop(ctx)
		}
		if w.live != nil {
			w.live.Stop()
		}
		if w.pauses != nil {
			w.pauses.Stop()
		}
		if w.ownConn {
			w.nc.Close()
		}
		return err
	}
	close(w.started)
	w.readiness.Started()
	return nil
}

func (w *Worker) start(ctx context.Context) error {
	js, err := jetstream.New(w.nc)
	if err != nil {
		return err
	}
	if err := streams.Ensure(ctx, js, w.cfg.Streams); err != nil {
		return err
	}
	if w.pauses, err = jshost.NewPauses(ctx, js, jshost.PausesOptions{Watch: true, Logger: w.logger}); err != nil {
		return err
	}
	ecfg := engine.Config{Runtime: w.reg, BuildID: w.reg.BuildID(), StepConcurrency: w.cfg.StepConcurrency, CacheSize: w.cfg.CacheSize, Pauses: w.pauses,
		SerialCommits: w.cfg.SerialCommits, HoldTimers: w.cfg.HoldTimers, HoldMax: w.cfg.HoldMax}
	if ecfg.StepLimits, err = w.stepLimits(ctx, js); err != nil {
		return err
	}
	if !w.cfg.SkipReplayCheck {
		ecfg.Replayer = w.reg.Replaying()
	}
	be, err := backend.Open(ctx, js, backend.Role{Source: "flow/worker/" + w.cfg.Queue, Unsigned: true, Logger: w.logger, Faults: w.cfg.Faults, HostFaults: w.cfg.Faults,
		Payloads: true, PayloadThreshold: w.cfg.PayloadThreshold, Checkpoints: w.cfg.CheckpointEvery >= 0, Heartbeats: true,
		Host: func(h *jshost.Host) engine.Host { return &historyHost{Host: h, nc: w.nc} }}, ecfg)
	if err != nil {
		return err
	}
	w.reg.UsePayloads(be.Payloads)
	w.engine, w.host = be.Engine, be.Host
	hostname, _ := os.Hostname()
	w.id = liveness.NewID(hostname, os.Getpid()) // before any handler parks a run
	// The view before the first task, the entry before the registration: a worker that reads
	// the registration (or the history service dispatching parked runs on it) finds the entry.
	if w.live, err = liveness.Watch(context.WithoutCancel(ctx), js, w.logger); err != nil {
		return err
	}
	if err := w.publishLiveness(ctx, js, hostname); err != nil {
		return err
	}
	if err := w.publishDefinitions(ctx, js); err != nil {
		return err
	}
	// Runs any build may drive, and, for a worker with a build ID, runs pinned to its build.
	builds := []string{""}
	if id := w.reg.BuildID(); id != "" {
		builds = append(builds, id)
	}
	w.beat = w.cfg.AckWait / 3
	for _, build := range builds {
		cons, err := streams.TaskConsumer(ctx, js, w.cfg.Queue, build, w.cfg.AckWait, max(1000, 4*w.cfg.RunConcurrency)+4*w.cfg.HoldMax)
		if err != nil {
			return err
		}
		// The queue's workers share the consumer, whose AckWait the last one to start set: beat by it.
		if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
			w.beat = min(w.beat, info.Config.AckWait/3)
		}
		w.cons = append(w.cons, cons)
	}
	if err := w.serveQueries(); err != nil {
		return err
	}
	// The last step that can fail: nothing runs yet that Start would have to stop.
	if w.probes, err = health.Listen(w.cfg.HTTPAddr, w.Ready, w.logger); err != nil {
		_ = w.querySvc.Stop()
		return fmt.Errorf("worker: listening on %s for /healthz, /readyz and /metrics: %w (set FLOW_WORKER_HTTP_ADDR to another address, or \"off\")", w.cfg.HTTPAddr, err)
	}
	w.runCtx, w.cancelRuns = context.WithCancel(context.WithoutCancel(ctx))
	w.slots = make(chan struct{}, w.cfg.RunConcurrency)
	if err := w.serveOffers(builds); err != nil {
		w.cancelRuns()
		_ = w.querySvc.Stop()
		_ = w.probes.Shutdown(ctx)
		return fmt.Errorf("worker: subscribing to the offers of new runs: %w", err)
	}
	var fetchers sync.WaitGroup
	for _, cons := range w.cons {
		fetchers.Go(func() { w.fetch(cons, w.slots) })
	}
	go func() { fetchers.Wait(); close(w.fetchDone) }()
	w.observe()
	w.logger.InfoContext(ctx, "worker started", slog.Any("workflows", w.reg.Workflows()), slog.Any("steps", w.reg.Steps()),
		slog.String("build_id", w.reg.BuildID()), slog.String("worker_id", w.id))
	return nil
}

// ID returns the worker's ID: the last token of its FLOW_WORKERS key (see liveness.Key), set
// by Start.
func (w *Worker) ID() string { return w.id }

func (w *Worker) publishLiveness(ctx context.Context, js jetstream.JetStream, hostname string) error {
	entry := liveness.Worker{ID: w.id, Name: fmt.Sprintf("%s-%d", hostname, os.Getpid()), Queue: w.cfg.Queue,
		BuildID: w.reg.BuildID(), Host: hostname, PID: os.Getpid()}
	for _, name := range w.reg.Workflows() {
		id, err := w.reg.Identity(name)
		if err != nil {
			return err
		}
		entry.Definitions = append(entry.Definitions, liveness.Registration{Definition: name, Patches: id.Patches, Attributes: id.Attributes,
			Control: w.reg.FlowControl(name), Timeouts: w.reg.RunTimeouts(name)})
	}
	var err error
	w.pub, err = liveness.Publish(ctx, js, entry, w.logger)
	return err
}

func (w *Worker) publishDefinitions(ctx context.Context, js jetstream.JetStream) error {
	defs, err := definitions.Open(ctx, js)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	for _, name := range w.reg.Workflows() {
		id, err := w.reg.Identity(name)
		if err != nil {
			return err
		}
		d := definitions.Definition{Definition: name, Queue: w.cfg.Queue, BuildID: id.BuildID, Patches: id.Patches,
			UpdatedAt: time.Now().UTC(), Host: host, Attributes: id.Attributes, Control: w.reg.FlowControl(name),
			Timeouts: w.reg.RunTimeouts(name), Retention: event.Duration(w.reg.Retention(name))}
		if err := defs.Put(ctx, d); err != nil {
			return fmt.Errorf("publishing definition %q: %w", name, err)
		}
	}
	return nil
}

// fetchWait bounds each pull request, and so how long Stop waits for the fetch loop.
const fetchWait = time.Second

// fetch pulls tasks from cons and hands each to a handler at once, never more than
// RunConcurrency at a time across the worker's consumers (slots): every pull asks for as many
// tasks as it holds free slots, so that no task waits for a slot, unwatched, while its AckWait
// runs out. A pull that waits (a long poll) holds at most a share of the slots, so that an idle
// consumer leaves the rest to the worker's other one; when tasks are waiting, the worker takes
// them with every free slot.
func (w *Worker) fetch(cons jetstream.Consumer, slots chan struct{}) {
	share := max(1, w.cfg.RunConcurrency/len(w.cons))
	if !w.cfg.NoEagerStart {
		// Idle, the pulls leave a quarter of the slots to offered runs (eager.go).
		share = max(1, share*3/4)
	}
	retry := 100 * time.Millisecond
	for !w.stopping.Load() {
		select {
		case slots <- struct{}{}:
		case <-w.runCtx.Done():
			return
		}
		free := 1 + grab(slots, share-1)
		used, err := w.dispatch(slots, free, func() (jetstream.MessageBatch, error) {
			return cons.Fetch(free, jetstream.FetchMaxWait(fetchWait))
		})
		for err == nil && used == free {
			if free = grab(slots, w.cfg.RunConcurrency); free == 0 {
				break
			}
			used, err = w.dispatch(slots, free, func() (jetstream.MessageBatch, error) { return cons.FetchNoWait(free) })
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) && !w.stopping.Load() {
			w.logger.Warn("fetching tasks failed; retrying", slog.String("error", err.Error()), slog.Duration("in", retry))
			wait.For(w.runCtx, retry)
			retry = min(2*retry, 5*time.Second)
			continue
		}
		retry = 100 * time.Millisecond
	}
}

// dispatch hands the tasks of one pull to handlers, one held slot each, and frees the slots of
// the free it held that no task used.
func (w *Worker) dispatch(slots chan struct{}, free int, pull func() (jetstream.MessageBatch, error)) (int, error) {
	used := 0
	batch, err := pull()
	if err == nil {
		for msg := range batch.Messages() {
			used++
			w.inflight.Add(1)
			go func() {
				release := sync.OnceFunc(func() { <-slots })
				defer func() { release(); w.inflight.Done() }()
				w.handle(msg, release)
			}()
		}
		err = batch.Error()
	}
	for range free - used {
		<-slots
	}
	return used, err
}

// grab takes up to n free slots without waiting and returns how many it took.
func grab(slots chan struct{}, n int) int {
	for i := range n {
		select {
		case slots <- struct{}{}:
		default:
			return i
		}
	}
	return n
}

// handle drives the run a task names, with heartbeats, and settles the task: acknowledged when
// the run is suspended, ended, blocked or parked (none of these needs the task again: the next
// input, a deploy or `flow resume` sends a new one), redelivered later when the drive failed.
// release frees the task's run slot: a drive that waits in place for a timer (HoldTimers) calls
// it early, and the caller once handle returns.
// The drive's context carries the run ID and the task's trace context (its ce-traceparent), the
// parent of the drive's spans for a run whose run.started recorded none.
func (w *Worker) handle(msg jetstream.Msg, release func()) {
	ctx := w.runCtx
	if w.stopping.Load() {
		_ = msg.Nak() // another worker takes it at once
		return
	}
	runID, err := streams.RunOfTask(msg.Subject())
	if err != nil {
		w.logger.Error("dropping a malformed task", slog.String("subject", msg.Subject()), slog.String("error", err.Error()))
		_ = msg.Term()
		return
	}
	var task engine.Task
	if err := json.Unmarshal(msg.Data(), &task); err != nil || task.RunID != runID {
		task = engine.Task{RunID: runID}
	}
	task.RunID = runID
	if task.Offered && w.adopted(runID, msg) {
		return // settled by the drive of the offer this worker took (eager.go)
	}
	if w.engine.Join(task) {
		_ = msg.Ack() // the run's driver in this process reads up to the task's seq (or fires its timer) before it stops
		return
	}
	if task.Offered && !w.engine.Ended(runID) && w.drivenElsewhere(runID) {
		_ = msg.NakWithDelay(w.offeredRecheck(msg)) // the worker that took its offer drives it (eager.go)
		return
	}
	if sc, ok := cloudevent.TraceFromHeaders(msg.Headers()); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx = tracing.WithRunID(ctx, runID)
	stop := w.heartbeat(msg)
	task.RunID, task.FirstDelivery, task.Release = runID, deliveries(msg) == 1 && !task.Offered, release
	res, err := w.engine.DriveTask(ctx, task)
	stop()
	var wrongBuild *engine.WrongBuildError
	var unknown *engine.UnknownDefinitionError
	var limited *engine.StepLimitedError
	var held *engine.HeldError
	switch {
	case errors.As(err, &held):
		w.parkHeld(ctx, msg, held, task.Seq)
	case errors.As(err, &limited):
		// Its attempts wait for slots of their steps' limits: the task comes back after the
		// wait, and the run holds no worker meanwhile.
		w.logger.InfoContext(ctx, "a step attempt waits for a slot of its step's limit", slog.String("run_id", runID),
			slog.String("step_id", limited.StepID), slog.String("step", limited.Step), slog.String("why", limited.Why),
			slog.Duration("retry_in", limited.Wait))
		_ = msg.NakWithDelay(max(limited.Wait, 10*time.Millisecond))
	case errors.As(err, &wrongBuild):
		// Tasks of pinned runs reach only their build's workers; one that did not (published
		// by an older version) is parked until a worker of its build registers.
		w.park(ctx, msg, parked.Run{RunID: runID, Queue: wrongBuild.Queue, Definition: wrongBuild.Definition, Build: wrongBuild.RunBuild,
			Reason: fmt.Sprintf("pinned to build %q; waiting for a worker of that build on queue %q (this worker runs build %q)",
				wrongBuild.RunBuild, w.cfg.Queue, wrongBuild.EngineBuild), Seq: task.Seq})
	case errors.As(err, &unknown):
		// Stamped before looking for another worker: one that registers after the look has a
		// later registration, which dispatches the parked run again.
		parkedAt := time.Now().UTC()
		if w.handBack(ctx, msg, unknown) {
			return
		}
		w.park(ctx, msg, parked.Run{RunID: runID, Queue: unknown.Queue, Definition: unknown.Definition, Build: unknown.RunBuild,
			Reason: fmt.Sprintf("waiting for a worker that registers workflow %q on queue %q", unknown.Definition, w.cfg.Queue), Seq: task.Seq,
			ParkedAt: parkedAt})
	case errors.Is(err, store.ErrDamaged):
		w.logger.ErrorContext(ctx, "not driving a run whose history is damaged", slog.String("run_id", runID), slog.String("error", err.Error()))
		_ = msg.Ack()
	case errors.Is(err, core.ErrNotFound):
		// The history was read from the stream's leader up to the task's seq and the run is not
		// there. A task names a commit that was made, but a leader that is behind in applying
		// what its followers already hold (a busy server: the history service may have read
		// the commit from a follower) answers as if it were not: read again later, and drop
		// the task only when the run stays absent. Dropping it at once would lose the run, as
		// the history service's copy of the task has the same message ID and is deduplicated.
		if deliveries(msg) < notFoundDeliveries {
			w.logger.InfoContext(ctx, "the run of a task is not readable yet; reading it again later", slog.String("run_id", runID),
				slog.Uint64("seq", task.Seq))
			_ = msg.NakWithDelay(notFoundDelay(msg))
			return
		}
		w.logger.WarnContext(ctx, "dropping a task for a run that does not exist", slog.String("run_id", runID), slog.Uint64("seq", task.Seq),
			slog.Int("deliveries", notFoundDeliveries))
		_ = msg.Term()
	case errors.Is(err, store.ErrBehind):
		// The task's commit exists; the server that answered had not applied it yet.
		w.logger.InfoContext(ctx, "the run was read short of the task's sequence; reading it again later", slog.String("run_id", runID),
			slog.String("error", err.Error()))
		_ = msg.NakWithDelay(notFoundDelay(msg))
	case err != nil:
		if ctx.Err() != nil {
			_ = msg.Nak() // shutting down: another worker takes it at once
			return
		}
		w.logger.WarnContext(ctx, "driving a run failed; the task will be retried", slog.String("run_id", runID), slog.String("error", err.Error()))
		_ = msg.NakWithDelay(backoff(msg))
	default:
		if res.Status == core.StatusBlocked {
			w.logger.InfoContext(ctx, "run blocked; parked until a deploy or `flow resume`", slog.String("run_id", runID))
		}
		_ = msg.Ack()
	}
}

// handBack returns a task of a run whose definition this worker does not register to the
// queue, unacknowledged and with nothing written, when another live worker that could drive the
// run registers it: that worker takes the task on a later delivery. It reports whether the task
// is settled; when it is not, no live worker serves the definition and the run is for parking.
// Before it gives up it reads the queue's workers from FLOW_WORKERS itself, so that a worker that
// just started is not missed.
func (w *Worker) handBack(ctx context.Context, msg jetstream.Msg, unknown *engine.UnknownDefinitionError) bool {
	serves := func(workers []liveness.Worker) bool {
		return slices.ContainsFunc(workers, func(o liveness.Worker) bool {
			return o.ID != w.id && o.Registers(unknown.Definition) && (unknown.RunBuild == "" || o.BuildID == unknown.RunBuild)
		})
	}
	if !serves(w.live.Workers(w.cfg.Queue)) {
		workers, err := w.live.Fetch(ctx, w.cfg.Queue)
		if err != nil {
			w.logger.WarnContext(ctx, "reading the queue's live workers failed; the task will be retried", slog.String("run_id", unknown.RunID),
				slog.String("error", err.Error()))
			_ = msg.NakWithDelay(backoff(msg))
			return true
		}
		if !serves(workers) {
			return false
		}
	}
	_ = msg.NakWithDelay(handBackDelay(msg))
	return true
}

// handBackDelay grows with the task's deliveries: 5ms, 10ms, 20ms ... up to 160ms, so that the
// worker that serves the run, not this one again, is likely to take it next.
func handBackDelay(msg jetstream.Msg) time.Duration {
	n := uint64(1)
	if md, err := msg.Metadata(); err == nil {
		n = max(md.NumDelivered, 1)
	}
	return 5 * time.Millisecond << min(n-1, 5)
}

// park asks the history service to record why no worker of this build can drive a run, for it
// to show and to dispatch the run again when a worker that can registers, then acknowledges the
// task. p.ParkedAt zero is now. If the history service does not record it the task is
// redelivered later.
func (w *Worker) park(ctx context.Context, msg jetstream.Msg, p parked.Run) {
	if p.ParkedAt.IsZero() {
		p.ParkedAt = time.Now().UTC()
	}
	p.By = w.id
	parked, err := askPark(ctx, w.nc, p)
	if err != nil {
		w.logger.WarnContext(ctx, "parking a run failed; the task will be retried", slog.String("run_id", p.RunID), slog.String("error", err.Error()))
		_ = msg.NakWithDelay(backoff(msg))
		return
	}
	if parked {
		w.logger.InfoContext(ctx, "run parked", slog.String("run_id", p.RunID), slog.String("reason", p.Reason))
	}
	_ = msg.Ack()
}

// heartbeat tells NATS the task is in progress every third of the consumer's AckWait until stop
// is called.
func (w *Worker) heartbeat(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	t := time.NewTicker(w.beat)
	go func() {
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = msg.InProgress()
			case <-done:
				return
			}
		}
	}()
	return func() { close(done) }
}

// backoff grows with the task's deliveries: 1s, 2s, 4s ... up to 5 minutes.
func backoff(msg jetstream.Msg) time.Duration {
	d := time.Second << min(deliveries(msg)-1, 9)
	return min(d, 5*time.Minute)
}

// deliveries is how many times msg has been delivered, this time included (1 if unknown).
func deliveries(msg jetstream.Msg) uint64 {
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 0 {
		return md.NumDelivered
	}
	return 1
}

// notFoundDeliveries is how many deliveries of a task find its run absent before the worker
// drops it; notFoundDelay spaces them: 250ms, 500ms, 1s, 2s, then 4s, about 16s in all.
const notFoundDeliveries = 8

func notFoundDelay(msg jetstream.Msg) time.Duration {
	return 250 * time.Millisecond << min(deliveries(msg)-1, 4)
}

// Stop stops taking tasks and waits for the runs being driven to reach a durable point, so that
// in-flight steps finish and their results are recorded. When ctx ends first, running steps see
// their context cancelled and the remaining tasks are redelivered. Stop is idempotent and safe
// before Start.
func (w *Worker) Stop(ctx context.Context) error {
	var err error
	w.stopOnce.Do(func() {
		select {
		case <-w.started:
		default:
			return
		}
		w.readiness.Stopping()
		w.stopping.Store(true)
		w.stopOffers()
		// No more queries: another worker of the queue answers them.
		if qerr := w.querySvc.Stop(); qerr != nil {
			w.logger.Warn("the query endpoints did not stop cleanly", slog.String("error", qerr.Error()))
		}
		// Gone from the views at once: other workers park runs of its definitions instead of
		// handing them back for it.
		if perr := w.pub.Stop(ctx); perr != nil {
			w.logger.Warn("the worker's liveness entry was not deleted", slog.String("error", perr.Error()))
		}
		<-w.fetchDone
		done := make(chan struct{})
		go func() { w.inflight.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("worker: stopping: %w; in-flight steps were cancelled", ctx.Err())
			w.cancelRuns()
			<-done
		}
		w.cancelRuns()
		if w.unobserve != nil {
			w.unobserve()
		}
		w.live.Stop()
		w.pauses.Stop()
		if w.ownConn {
			w.nc.Close()
		}
		hctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.probes.Shutdown(hctx)
		w.logger.Info("worker stopped")
	})
	return err
}
