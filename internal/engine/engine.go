// Package engine runs the replay loop over any event store: history -> snapshot -> one decision
// -> validated append -> continue, stop at a durable wait, or finish. It executes the steps a
// decision schedules (at least once) and records their results and retries; it appends the
// inputs that come from outside workflow code (signals, hook deliveries, timer fires,
// cancellations); and it carries out what a commit implies outside the run itself (ApplyCommit):
// timers, resume tasks, child runs, the parent's notice, cancelling children, continuation.
//
// The engine holds no state that matters for correctness: its snapshot cache only saves reads.
// Any engine, in any process, can drive any run after any committed event. What a commit implies
// outside the run cannot be atomic with the append, so it is a function of the history: the
// history service applies it to every commit it consumes (ApplyCommit), and the writer of a
// commit may do the same at once as a fast path. Correctness never depends on the fast path.
package engine

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/pkg/event"
)

// Runtime is the code the engine runs: workflow decisions and step attempts.
type Runtime interface {
	core.Decider
	// RunStep runs one attempt of a step. It must return (not panic) when ctx is cancelled.
	RunStep(ctx context.Context, a core.Attempt) core.StepOutcome
}

// Host receives the engine's effects outside the run's own history. Every method must be
// idempotent: the engine repeats them after crashes and redeliveries.
type Host interface {
	// ScheduleTimers registers timers durably, keyed by run ID and Timer.Key.
	ScheduleTimers(ctx context.Context, timers []core.Timer) error
	// DeleteTimers removes the entries of timers that became moot; absent ones are no error.
	DeleteTimers(ctx context.Context, timers []core.Timer) error
	// RegisterHook routes token to hook hookID of run runID. It must be create-only: if the
	// token routes to another hook it returns an error wrapping ErrTokenTaken. The engine
	// calls it before committing the hook.created that needs the route, and, in the history
	// service, for the hooks a reset run copied (ApplyCommit). A worker's host asks the history
	// service, FLOW_HOOKS's one writer, to claim the token (Engine.ClaimHook).
	RegisterHook(ctx context.Context, token, runID, hookID string) error
	// LookupHook returns the run and hook a token routes to, or an error wrapping
	// core.ErrNotFound.
	LookupHook(ctx context.Context, token string) (runID, hookID string, err error)
	// ReleaseHook frees token if it still routes to hook hookID of run runID, so that another
	// run may use it; a token routed elsewhere, or not at all, is left alone.
	ReleaseHook(ctx context.Context, token, runID, hookID string) error
	// Resume asks for a run to be driven soon. Tasks with the same Key are collapsed.
	Resume(ctx context.Context, t Task) error
}

// Offerer is a Host that can offer a new run to a live worker (eager start).
type Offerer interface {
	// ResumeOffered sends t, a new run's first task, as Resume does, or offers it to a live
	// worker of the run's queue, which then drives the run at once and sends t itself, marked
	// Offered (see Task.Offered), before it commits anything (Task.Backing).
	ResumeOffered(ctx context.Context, t Task) error
}

// Task asks for run RunID, on task queue Queue, to be driven because of the input at sequence
// Seq: a worker reads the run's history up to at least Seq.
type Task struct {
	RunID string `json:"run_id"`
	Queue string `json:"queue,omitempty"`
	// Build is the build the run is pinned to: only workers of that build receive the task.
	Build string `json:"build,omitempty"`
	Seq   uint64 `json:"seq"`
	// Nonce, when set, makes the task distinct from the one for the same Seq: a run parked
	// without a new event (blocked, or waiting for a worker that runs its code) is dispatched
	// again with a fresh nonce.
	Nonce string `json:"nonce,omitempty"`
	// TraceParent is the run's trace context (W3C traceparent), which the host carries in the
	// task's CloudEvents traceparent extension, not in its body. "" lets the host use the span
	// of the context it publishes with.
	TraceParent string `json:"-"`
	// Head, when set, is the commit that ends at Seq as its writer committed it: a new run's
	// run.started, an input. A worker that holds the run up to the commit's first event (or,
	// for a new run, nothing) applies it instead of reading the run.
	Head *Head `json:"head,omitempty"`
	// FirstDelivery is set by a worker whose queue delivered the task for the first time: no
	// other worker has received it, so for a new run's task (Seq 1) the driver is the run's
	// first writer and owns its tail from the start (pipeline.go).
	FirstDelivery bool `json:"-"`
	// Offered marks a new run's first task that a worker may have taken from another path
	// (Offerer; or the history service's copy of the ingress's task): a worker that receives it
	// asks whether another drives the run before it drives it, and never drives it as its first
	// writer.
	Offered bool `json:"offered,omitempty"`
	// Backing, when set, is called before each append of the drive, which is made only if it
	// returns fresh and no error: it waits until the run's durable task exists (the drive of a
	// run taken from an offer, whose task its taker sent), and fresh reports whether the taker's
	// copy was the task's first. If not, a copy queued earlier is the run's task, and whoever
	// holds it drives the run: this drive appends nothing and starts no step ahead of a
	// commit (ErrTaskQueued). It must return the same each time.
	Backing func() (fresh bool, err error) `json:"-"`
	// Release, when set, is called at most once, by a drive that waits in place for one of its
	// run's timers (Config.HoldTimers): it needs no run slot of its worker meanwhile.
	Release func() `json:"-"`
}

// Head is one commit of a run, carried by a task, with its store position (store.Positioner).
type Head struct {
	// Events are the envelopes, encoded as in a commit (event.MarshalEnvelopes).
	Events json.RawMessage `json:"events"`
	// Position is where the commit of the last event sits in the store.
	Position uint64 `json:"position"`
}

// Key identifies the task for deduplication: "<run>:<seq>", or "<run>:<seq>:<nonce>".
func (t Task) Key() string {
	k := t.RunID + ":" + strconv.FormatUint(t.Seq, 10)
	if t.Nonce != "" {
		k += ":" + t.Nonce
	}
	return k
}

// maxHead bounds the encoded commit a resume task carries: a driver reads a larger one.
const maxHead = 8 << 10

// commitHead returns the Head of the task that resumes run runID after committed, the events of
// the commit this engine just appended to it, or nil when the store cannot tell where that
// commit sits or the commit is large. The driver that holds the run up to the commit's first
// event applies it instead of reading the run.
func (e *Engine) commitHead(runID string, committed []event.Envelope) *Head {
	ps, ok := e.store.(store.Positioner)
	if !ok || len(committed) == 0 {
		return nil
	}
	seq, pos, ok := ps.Position(runID)
	if !ok || seq != committed[len(committed)-1].Seq {
		return nil
	}
	b, err := event.MarshalEnvelopes(committed)
	if err != nil || len(b) > maxHead {
		return nil
	}
	return &Head{Events: b, Position: pos}
}

// ErrTokenTaken is wrapped by Host.RegisterHook when a token already routes to another hook.
var ErrTokenTaken = errors.New("flow: hook token already in use")

// TokenTakenError is the error hosts return when a token routes to another hook. It matches
// ErrTokenTaken.
type TokenTakenError struct {
	// RunID and HookID name the hook the token routes to.
	RunID, HookID string
}

func (e *TokenTakenError) Error() string {
	return fmt.Sprintf("%v: routes to hook %q of run %q", ErrTokenTaken, e.HookID, e.RunID)
}

// Is matches ErrTokenTaken.
func (e *TokenTakenError) Is(target error) bool { return target == ErrTokenTaken }

// Clock tells the time. Tests pass a virtual clock.
type Clock interface{ Now() time.Time }

// defaultHoldTimers is Config.HoldTimers's default.
const defaultHoldTimers = 50 * time.Millisecond

// defaultHoldMax is Config.HoldMax's default.
const defaultHoldMax = 1024

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Config configures an Engine. Store and Host are required.
type Config struct {
	Store store.EventStore
	// Runtime runs workflow and step code. Without it the engine only appends inputs from
	// outside the code (signals, timers, cancellations) and cannot Drive.
	Runtime Runtime
	Host    Host
	// Replayer, when set, verifies a run's whole history each time the engine loads it without a
	// cached snapshot (core.Replay): code that would have decided differently blocks the run.
	// Pass a view of the runtime that keeps workflow logging quiet. Defaults to nil (no check).
	Replayer core.Decider
	// BuildID is recorded in decision.failed events. Defaults to "".
	BuildID string
	// Clock stamps events. Defaults to the system clock.
	Clock Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// StepConcurrency caps the step attempts running at once in this engine. Defaults to 64.
	StepConcurrency int
	// SerialCommits makes a driver wait for each commit's acknowledgement before its run goes
	// on. Defaults to false: commits are pipelined, one append in flight per run and the
	// commits recorded meanwhile buffered into the next (pipeline.go).
	SerialCommits bool
	// HoldTimers is how long before one of its run's own timers (a wait, a retry backoff) falls
	// due a drive that would end waits in place to fire it itself (due.go), releasing its run
	// slot (Task.Release). Defaults to 50ms (a worker's to 5s); negative never holds a run.
	HoldTimers time.Duration
	// HoldMax caps the drives waiting in place for a timer at once; a drive past it ends, and
	// its timer is handed off to the run's workers when due. Defaults to 1,024.
	HoldMax int
	// CacheSize caps the number of run snapshots kept between drives. Defaults to 10,000;
	// negative disables the cache.
	CacheSize int
	// Faults injects failures between writes, for tests. Defaults to nil (none).
	Faults *fault.Injector
	// Keys is the shared index of dedup and debounce keys (docs/start-policies.md). Defaults to
	// nil: starts with a dedup key or a debounce are refused with ErrNoStartKeys.
	Keys StartKeys
	// StepLimits takes the slots of limited steps before their attempts run. Defaults to nil
	// (no step is limited).
	StepLimits StepLimiter
	// Heartbeats records the starts and heartbeats of step attempts (FLOW_HEARTBEATS, see
	// docs/timeouts.md). Defaults to nil: flow.Heartbeat records nothing, and step timeouts
	// other than the schedule-to-start timeout are not watched.
	Heartbeats Heartbeats
	// Pauses keeps the definition and queue pauses (pause.go). Defaults to nil: nothing is
	// paused but runs, and the definition and queue pause calls return ErrNoPauses.
	Pauses Pauses
	// Payloads, when set, is where payloads over its threshold are offloaded, the history
	// holding a reference (docs/large-payloads.md). Defaults to nil: payloads stay inline.
	Payloads Payloads
	// Checkpoints, when set, is where a cold load reads a run's latest snapshot checkpoint and
	// then only the history after it (docs/large-payloads.md). The engine never writes
	// checkpoints: the history service does, as it follows the history. Defaults to nil: every
	// cold load reads the whole history.
	Checkpoints CheckpointReader
	// Pending bounds the inputs a run holds unconsumed (pending.go): signals and updates past
	// it are refused with a *PendingError. Defaults to the zero value: no bound.
	Pending PendingLimits
}

// Engine drives runs. It is safe for concurrent use; drivers of one run are serialised.
type Engine struct {
	faults   *fault.Injector
	store    store.EventStore
	rt       Runtime
	replayer core.Decider
	host     Host
	clock    Clock
	logger   *slog.Logger
	buildID  string
	slots    *stepSlots
	locks    runLocks
	cache    *cache
	keys     StartKeys
	// stepLimits is Config.StepLimits.
	stepLimits StepLimiter
	// heartbeats is Config.Heartbeats.
	heartbeats Heartbeats
	// pauses is Config.Pauses.
	pauses Pauses
	// payloads and checkpoints are Config's.
	payloads    Payloads
	checkpoints CheckpointReader
	// pending is Config.Pending.
	pending PendingLimits
	// serialCommits is Config.SerialCommits.
	serialCommits bool
	// holdTimers and holdMax are Config.HoldTimers and HoldMax, defaulted; holding counts the
	// drives waiting in place for a timer.
	holdTimers time.Duration
	holdMax    int64
	holding    atomic.Int64
	// ended remembers the runs this engine's drives saw end, with their results: a timer
	// handed off for one of them needs no drive (due.go).
	ended *endedRuns
}

// New returns an engine.
func New(cfg Config) (*Engine, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("engine: Config.Store is required")
	case cfg.Host == nil:
		return nil, errors.New("engine: Config.Host is required")
	case cfg.StepConcurrency < 0:
		return nil, fmt.Errorf("engine: Config.StepConcurrency must not be negative, got %d", cfg.StepConcurrency)
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StepConcurrency == 0 {
		cfg.StepConcurrency = 64
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = 10_000
	}
	return &Engine{faults: cfg.Faults, store: cfg.Store, rt: cfg.Runtime, replayer: cfg.Replayer, host: cfg.Host, clock: cfg.Clock,
		logger: cfg.Logger, buildID: cfg.BuildID, slots: newStepSlots(cfg.StepConcurrency), cache: newCache(cfg.CacheSize),
		keys: cfg.Keys, stepLimits: cfg.StepLimits, heartbeats: cfg.Heartbeats, pauses: cfg.Pauses, payloads: cfg.Payloads, checkpoints: cfg.Checkpoints,
		pending: cfg.Pending, serialCommits: cfg.SerialCommits, holdTimers: cmp.Or(cfg.HoldTimers, defaultHoldTimers),
		holdMax: int64(cmp.Or(cfg.HoldMax, defaultHoldMax)), ended: newEndedRuns(endedRunsMax)}, nil
}

// StartParams describe a new run.
type StartParams struct {
	// RunID is the caller's ID for the run; empty generates one. Caller IDs follow
	// event.ValidateRunID; IDs Flow derives (children, continuations) may hold '='.
	RunID string
	// Spec names the definition and pins build and patches. Spec.Definition is required.
	Spec  event.Spec
	Input []byte
	Queue string
	// Parent, ContinuedFrom and Generation link children and continuations.
	Parent        *event.ParentRef
	ContinuedFrom string
	Generation    int
	// Attributes are the run's search attributes, typed by the definition's declarations;
	// run.started records them. Empty for none.
	Attributes event.Attributes
	// OnConflict says what to do when RunID's latest run is active; "" is event.ConflictFail.
	// See docs/start-policies.md.
	OnConflict event.ConflictPolicy
	// Reuse says whether a new run may reuse RunID when its latest run ended; "" is
	// event.ReuseRefuse.
	Reuse event.ReusePolicy
	// Delay delays the run's first decision: run.started records NotBefore (the start's time
	// plus Delay) and the scheduler fires run.delay_fired then. 0 starts at once.
	Delay time.Duration
	// DedupKey, with DedupWindow, deduplicates starts: a start with the same key (per
	// definition) within DedupWindow of the first returns the first's run. Needs Config.Keys.
	DedupKey    string
	DedupWindow time.Duration
	// Debounce collapses the starts with the same key within a quiet period into one run,
	// started after the period with the latest input. Needs Config.Keys.
	Debounce *Debounce
	// RequestID identifies the start request, so that its retry is answered with the run it
	// started instead of applying OnConflict or Reuse again (a second replacement). "" for
	// none. Recorded in run.started's start policy.
	RequestID string
	// Priority orders the run's admission and its step attempts (higher first); a child run
	// inherits its parent's.
	Priority int
	// Control is the flow control the run starts under (limits.Resolve computes it); nil for
	// none. The run then decides nothing until the admission controller appends run.admitted.
	Control *event.FlowControl
	// ExecutionTimeout bounds the run and the runs it continues as, from this start;
	// RunTimeout bounds this run alone (docs/timeouts.md). 0 for none. run.started records
	// them with their deadlines; the scheduler ends the run with run.failed when one passes.
	ExecutionTimeout, RunTimeout time.Duration
	// InheritedTimeouts is, for a continuation, its predecessor's recorded timeouts: the
	// execution deadline carries over. Nil otherwise.
	InheritedTimeouts *event.RunTimeouts
	// Schedule, set by the scheduler, names the schedule and slot the run is started for;
	// run.started records it. Nil for a start no schedule made.
	Schedule *event.ScheduleRef
}

// RunExistsError reports a start with the ID of an existing run whose spec or input differs.
// It matches ErrRunExists.
type RunExistsError struct {
	RunID string
	Field string
}

// ErrRunExists matches *RunExistsError. It is core.ErrRunExists, which the SDK re-exports.
var ErrRunExists = core.ErrRunExists

func (e *RunExistsError) Error() string {
	return fmt.Sprintf("flow: run %q already exists with a different %s; starting it again needs the same definition, spec and input, or choose another run ID", e.RunID, e.Field)
}

// Is matches ErrRunExists.
func (e *RunExistsError) Is(target error) bool { return target == ErrRunExists }

// Start appends run.started for a new run and asks for it to be driven. Starting an existing
// run ID again with the same spec, input, queue and links returns it with created false; with
// different ones it returns a *RunExistsError. p's start policies change this, and may start
// or return another run than p.RunID (docs/start-policies.md): the run ID returned is the run's
// own. A caller's run ID that later runs reused answers for the latest of them. Nothing is
// appended for invalid parameters. Once run.started is committed Start succeeds: its resume
// task is a fast path that the history service repeats.
func (e *Engine) Start(ctx context.Context, p StartParams) (runID string, created bool, err error) {
	started, err := e.prepareStart(&p)
	if err != nil {
		return "", false, err
	}
	if started, err = e.offloadStarted(ctx, started); err != nil {
		return "", false, fmt.Errorf("starting run %q: %w", p.RunID, err)
	}
	// The span that starts the run (the ingress request, the parent's decision) is the parent
	// of all the run's spans.
	started.TraceParent = tracing.TraceParent(ctx)
	if p.hasPolicy() || p.Parent == nil && p.ContinuedFrom == "" {
		if err := e.checkPolicy(&p, started); err != nil {
			return "", false, err
		}
		return e.startWithPolicy(ctx, p, started)
	}
	if err := e.faults.Hit(fault.StoreAppend); err != nil {
		return "", false, fmt.Errorf("appending run.started: %w", err)
	}
	at := e.clock.Now().UTC()
	_, err = e.store.Append(ctx, p.RunID, 0, event.Event{Time: at, Payload: started})
	countAppend(ctx, err)
	if errors.Is(err, store.ErrConflict) {
		if err := e.sameStart(ctx, p.RunID, started); err != nil {
			return p.RunID, false, err
		}
		return p.RunID, false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("appending run.started: %w", err)
	}
	e.logger.DebugContext(ctx, "run started", slog.String("run_id", p.RunID), slog.String("definition", p.Spec.Definition))
	e.resumeStarted(ctx, Task{RunID: p.RunID, Queue: p.Queue, Build: p.Spec.BuildID, Seq: 1, TraceParent: started.TraceParent,
		Head: e.commitHead(p.RunID, []event.Envelope{{RunID: p.RunID, Seq: 1, Time: at, Payload: started}})})
	return p.RunID, true, nil
}

// resumeStarted sends a new run's first task t: offered to a live worker too when the host can
// (Offerer). Like resume, it only logs a failure.
func (e *Engine) resumeStarted(ctx context.Context, t Task) {
	o, ok := e.host.(Offerer)
	if !ok {
		e.resume(ctx, t)
		return
	}
	err := e.faults.Hit(fault.AfterAppendBeforeTask)
	if err == nil {
		err = o.ResumeOffered(ctx, t)
	}
	if err != nil {
		e.logger.DebugContext(ctx, "resume task not sent; the history service sends it", slog.String("run_id", t.RunID),
			slog.Uint64("seq", t.Seq), slog.String("error", err.Error()))
	}
}

// resume publishes a resume task as a fast path: the history service derives the same task from
// the history, so a failure here is logged, not returned.
func (e *Engine) resume(ctx context.Context, t Task) {
	err := e.faults.Hit(fault.AfterAppendBeforeTask)
	if err == nil {
		err = e.host.Resume(ctx, t)
	}
	if err != nil {
		e.logger.DebugContext(ctx, "resume task not sent; the history service sends it", slog.String("run_id", t.RunID),
			slog.Uint64("seq", t.Seq), slog.String("error", err.Error()))
	}
}

func (e *Engine) prepareStart(p *StartParams) (*event.RunStarted, error) {
	derived := p.Parent != nil || p.ContinuedFrom != ""
	switch {
	case p.RunID == "":
		p.RunID = rand.Text()
	case derived:
		if err := event.ValidateDerivedRunID(p.RunID); err != nil {
			return nil, err
		}
	default:
		if err := event.ValidateRunID(p.RunID); err != nil {
			return nil, err
		}
	}
	if err := event.ValidateName("definition", p.Spec.Definition); err != nil {
		return nil, err
	}
	if p.Queue != "" {
		if err := event.ValidateName("queue", p.Queue); err != nil {
			return nil, err
		}
	}
	in := p.Input
	if len(in) == 0 {
		in = []byte("null")
	}
	input, err := core.CanonicalJSON(in)
	if err != nil {
		return nil, fmt.Errorf("%w: the input of run %q is not valid JSON: %w", core.ErrInvalidInput, p.RunID, err)
	}
	if err := p.Attributes.Validate(); err != nil {
		return nil, fmt.Errorf("%w: run %q: %w", core.ErrInvalidInput, p.RunID, err)
	}
	if p.Control != nil {
		if err := p.Control.Validate(); err != nil {
			return nil, fmt.Errorf("%w: the flow control of run %q: %w", core.ErrInvalidInput, p.RunID, err)
		}
	}
	timeouts, err := core.RunTimeouts(p.ExecutionTimeout, p.RunTimeout, e.clock.Now(), p.InheritedTimeouts)
	if err != nil {
		return nil, fmt.Errorf("run %q: %w", p.RunID, err)
	}
	return &event.RunStarted{Spec: p.Spec, Input: input, Queue: p.Queue, Seed: rand.Text(), Parent: p.Parent,
		ContinuedFrom: p.ContinuedFrom, Generation: p.Generation, Attributes: p.Attributes, Priority: p.Priority, Control: p.Control,
		Timeouts: timeouts, Schedule: p.Schedule}, nil
}

// Existing checks a start against the run it names, appending nothing: false when run p.RunID
// does not exist; true when it exists and was started as p would start it, with any build and
// patches (p.Spec names only the definition of a start that cannot know them); else a
// *RunExistsError. The error of a quarantined run wraps store.ErrDamaged.
func (e *Engine) Existing(ctx context.Context, p StartParams) (bool, error) {
	want, err := e.prepareStart(&p)
	if err != nil {
		return false, err
	}
	got, err := e.started(ctx, p.RunID)
	if err != nil || got == nil {
		return false, err
	}
	return true, compareStart(p.RunID, got, want, true)
}

// sameStart checks that the existing run runID was started like want.
func (e *Engine) sameStart(ctx context.Context, runID string, want *event.RunStarted) error {
	got, err := e.started(ctx, runID)
	if err != nil {
		return err
	}
	if got == nil {
		return fmt.Errorf("run %q conflicted on start but has no events", runID)
	}
	return compareStart(runID, got, want, false)
}

// started returns the run.started of run runID, or nil if the run has no events.
func (e *Engine) started(ctx context.Context, runID string) (*event.RunStarted, error) {
	hist, err := e.store.Load(ctx, runID, 0)
	if err != nil {
		return nil, fmt.Errorf("loading run %q: %w", runID, err)
	}
	if len(hist) == 0 {
		return nil, nil
	}
	got, ok := hist[0].Payload.(*event.RunStarted)
	if !ok {
		return nil, fmt.Errorf("%w: run %q does not begin with run.started", core.ErrInvalidHistory, runID)
	}
	return got, nil
}

// compareStart returns a *RunExistsError naming the first field in which run runID's
// run.started got differs from want, or nil. With anySpec, build ID and patches are not
// compared.
func compareStart(runID string, got, want *event.RunStarted, anySpec bool) error {
	// A child is identified by its parent's link: whoever starts it again (the parent's worker
	// after a deploy, the history service for a history that recorded no child spec) starts the
	// same run, whatever code identity it would pick now.
	sameChild := got.Parent != nil && want.Parent != nil && *got.Parent == *want.Parent
	switch {
	case got.Spec.Definition != want.Spec.Definition:
		return &RunExistsError{RunID: runID, Field: "definition"}
	case !anySpec && !sameChild && (got.Spec.BuildID != want.Spec.BuildID || !slices.Equal(got.Spec.Patches, want.Spec.Patches)):
		return &RunExistsError{RunID: runID, Field: "spec (build ID or patches)"}
	case !core.JSONEqual(got.Input, want.Input):
		return &RunExistsError{RunID: runID, Field: "input"}
	case got.Queue != want.Queue:
		return &RunExistsError{RunID: runID, Field: "queue"}
	case (got.Parent == nil) != (want.Parent == nil) || got.Parent != nil && *got.Parent != *want.Parent:
		return &RunExistsError{RunID: runID, Field: "parent"}
	case got.ContinuedFrom != want.ContinuedFrom || got.Generation != want.Generation:
		return &RunExistsError{RunID: runID, Field: "continuation"}
	case !anySpec && !got.Attributes.Equal(want.Attributes):
		return &RunExistsError{RunID: runID, Field: "set of search attributes"}
	}
	return nil
}

// now returns the time to stamp on events appended after s: the clock, but never earlier than
// the run's latest event, so that recorded times never go backwards.
func (e *Engine) now(s *core.Snapshot) time.Time {
	t := e.clock.Now().UTC()
	if s != nil && t.Before(s.UpdatedAt) {
		return s.UpdatedAt
	}
	return t
}

// commit appends payloads after s.Seq and applies them to s. On a conflict s is unchanged.
func (e *Engine) commit(ctx context.Context, s *core.Snapshot, payloads []event.Payload) error {
	t := e.now(s)
	core.Stamp(payloads, t)
	first := s.Seq + 1
	if err := e.append(ctx, s.RunID, s.Seq, t, payloads); err != nil {
		return err
	}
	return e.applyCommitted(s, first, t, payloads)
}

// append appends payloads to run runID as sequences expected+1.., all recorded at t.
func (e *Engine) append(ctx context.Context, runID string, expected uint64, t time.Time, payloads []event.Payload) error {
	if err := e.faults.Hit(fault.StoreAppend); err != nil {
		return err
	}
	// Replaced in place: the caller applies what was appended, references included.
	if err := e.offload(ctx, payloads); err != nil {
		return err
	}
	events := make([]event.Event, len(payloads))
	for i, p := range payloads {
		events[i] = event.Event{Time: t, Payload: p}
	}
	return e.appendEvents(ctx, runID, expected, events)
}

// ErrTaskQueued is returned by the drive of a run taken from an offer whose task was queued
// before the taker sent its own (Task.Backing): the queued task's holder drives the run.
var ErrTaskQueued = errors.New("the run's task was queued before this drive's: its holder drives the run")

// backingKey keys the Task.Backing of the drive a context belongs to.
type backingKey struct{}

// appendEvents appends events, offloaded, to run runID as sequences expected+1..., once the
// drive's task is backed (Task.Backing).
func (e *Engine) appendEvents(ctx context.Context, runID string, expected uint64, events []event.Event) error {
	if backed, ok := ctx.Value(backingKey{}).(func() (bool, error)); ok {
		fresh, err := backed()
		if err != nil {
			return fmt.Errorf("the task of run %q is not stored, so nothing is appended: %w", runID, err)
		}
		if !fresh {
			return fmt.Errorf("run %q: %w", runID, ErrTaskQueued)
		}
	}
	_, err := e.store.Append(ctx, runID, expected, events...)
	countAppend(ctx, err)
	return err
}

// applyCommitted applies payloads, committed as sequences first.. at t, to s.
func (e *Engine) applyCommitted(s *core.Snapshot, first uint64, t time.Time, payloads []event.Payload) error {
	for i, p := range payloads {
		if err := s.Apply(event.Envelope{RunID: s.RunID, Seq: first + uint64(i), Time: t, Payload: p}); err != nil {
			e.cache.drop(s.RunID)
			return fmt.Errorf("engine bug: committed events that break the history: %w", err)
		}
	}
	return nil
}

// countAppend counts an append by its outcome: committed, or refused by a concurrent writer.
func countAppend(ctx context.Context, err error) {
	switch {
	case err == nil:
		metrics.Append(ctx)
	case errors.Is(err, store.ErrConflict):
		metrics.Conflict(ctx)
	}
}

// Snapshot returns a fresh projection of run runID, owned by the caller. It returns an error
// wrapping core.ErrNotFound if the run has no events.
func (e *Engine) Snapshot(ctx context.Context, runID string) (*core.Snapshot, error) {
	return e.snapshot(ctx, runID, 1)
}

// snapshot projects run runID's history, read up to at least atLeast.
// followable returns run runID's snapshot as snapshot does, or, for a run whose history was
// deleted, what its run.deleted record tells (core.DeletedSnapshot): an ended run with the links
// its chain goes on by, for code that follows chains (inputs, start policies, resets).
func (e *Engine) followable(ctx context.Context, runID string, atLeast uint64) (*core.Snapshot, error) {
	s, err := e.snapshot(ctx, runID, atLeast)
	var de *store.DeletedError
	if errors.As(err, &de) {
		return core.DeletedSnapshot(runID, de.Seq, de.Time, de.Deletion)
	}
	return s, err
}

func (e *Engine) snapshot(ctx context.Context, runID string, atLeast uint64) (*core.Snapshot, error) {
	if s, tail, err := e.fromCheckpoint(ctx, runID, atLeast); err == nil {
		if err := s.ApplyAll(tail); err != nil {
			return nil, err
		}
		return s, nil
	} else if !errors.Is(err, errNoCheckpoint) {
		return nil, err
	}
	hist, err := e.store.LoadAtLeast(ctx, runID, 0, atLeast)
	if err != nil {
		return nil, err
	}
	if len(hist) == 0 {
		return nil, fmt.Errorf("%w: run %q", core.ErrNotFound, runID)
	}
	return core.Project(runID, hist)
}

// CachedRuns returns the number of snapshots in the cache.
func (e *Engine) CachedRuns() int { return e.cache.len() }
