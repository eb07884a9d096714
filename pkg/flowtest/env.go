// Package flowtest runs workflows end to end in memory, on a virtual clock, for tests and
// examples. An [Env] holds an in-memory event store and the same engine workers use; every
// operation drives the affected runs until they are suspended, blocked or ended before it
// returns, so tests need no sleeps and no polling. Timers fire only when the test advances the
// clock ([Env.Advance]); signals and hook deliveries are injected by the test.
//
// Steps run the functions registered in the registry, or mocks installed with [Env.OnStep], one
// at a time in scheduling order, so results are deterministic.
//
// [Replay] verifies that workflow code still replays a recorded history, for compatibility tests
// in CI.
package flowtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/memstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// Options configure an Env. The zero value works.
type Options struct {
	// Start is the virtual clock's initial time. Defaults to 2026-01-01T00:00:00Z.
	Start time.Time
	// Logger receives engine and workflow logs. Defaults to discarding them.
	Logger *slog.Logger
	// SkipReplayCheck turns off the verification, on every cold load, that the workflow code
	// replays the run's history. Defaults to false (verify).
	SkipReplayCheck bool
	// CacheSize is the engine's snapshot cache size. Defaults to the engine default; -1 disables
	// the cache so that every drive loads and verifies the run's whole history.
	CacheSize int
}

// DefaultStart is the virtual clock's default initial time.
var DefaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// StepFunc is a mock step function; its output is encoded to JSON.
type StepFunc func(ctx context.Context, input json.RawMessage) (any, error)

// Env is an in-memory Flow: store, engine, virtual clock, timer index and hook routes. Its
// methods are safe for concurrent use but drive runs one at a time.
type Env struct {
	store  *memstore.Store
	opts   Options
	logger *slog.Logger

	// reg and engine change on Deploy; read them under mu.
	reg    *flow.Registry
	engine *engine.Engine

	driving sync.Mutex // serialises drain

	mu         sync.Mutex
	now        time.Time
	timers     map[string]core.Timer
	hooks      map[string][2]string
	released   map[string]bool
	queue      []string
	queued     map[string]bool
	mocks      map[string]StepFunc
	calls      map[string]int
	deliveries int
	// commits are the store's commits whose consequences are not applied yet, in commit order;
	// followed holds the latest projection of each run they touched.
	commits  []store.Commit
	followed map[string]*core.Snapshot
	// keys is the start key index of dedup and debounce keys, on the virtual clock.
	keys *engine.MemoryKeys
}

// New returns an Env running the workflows and steps of reg. opts may be nil.
func New(reg *flow.Registry, opts *Options) (*Env, error) {
	if opts == nil {
		opts = &Options{}
	}
	start := opts.Start
	if start.IsZero() {
		start = DefaultStart
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	env := &Env{store: memstore.New(), now: start.UTC(), timers: map[string]core.Timer{}, opts: *opts, logger: logger,
		hooks: map[string][2]string{}, released: map[string]bool{}, queued: map[string]bool{}, mocks: map[string]StepFunc{}, calls: map[string]int{},
		followed: map[string]*core.Snapshot{}}
	env.keys = &engine.MemoryKeys{Now: env.Now}
	env.store.OnCommit(func(c store.Commit) {
		env.mu.Lock()
		defer env.mu.Unlock()
		env.commits = append(env.commits, c)
	})
	if err := env.Deploy(reg); err != nil {
		return nil, err
	}
	return env, nil
}

// Deploy replaces the code the Env runs with reg, as deploying a new build does: runs keep
// their histories, timers and hook routes, and the new code picks them up from history with an
// empty cache, replaying each run it loads. Runs pinned to another build ID are not driven.
func (e *Env) Deploy(reg *flow.Registry) error {
	e.driving.Lock()
	defer e.driving.Unlock()
	rt := sdk.RuntimeOf(reg)
	cfg := engine.Config{Store: e.store, Runtime: runtimeView{e, rt}, Host: hostView{e}, Clock: e, Logger: e.logger,
		BuildID: reg.BuildID(), StepConcurrency: 1, CacheSize: e.opts.CacheSize, Keys: e.keys}
	if !e.opts.SkipReplayCheck {
		cfg.Replayer = rt.Replaying()
	}
	eng, err := engine.New(cfg)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.reg, e.engine = reg, eng
	e.mu.Unlock()
	return nil
}

// StartOptions adjust [Env.Start]. The zero value works.
type StartOptions struct {
	// RunID is the run's ID; empty generates one.
	RunID string
	// Queue is the run's task queue.
	Queue string
	// Attributes are the search attributes the run starts with (see flow.StartOptions).
	Attributes flow.Attrs
	// OnConflict, Reuse, Delay, DedupKey, DedupWindow and Debounce are the start policies, as
	// in flow.StartOptions (docs/start-policies.md); delays and quiet periods pass with Advance.
	OnConflict  flow.ConflictPolicy
	Reuse       flow.ReusePolicy
	Delay       time.Duration
	DedupKey    string
	DedupWindow time.Duration
	Debounce    *flow.Debounce
}

// Start starts a run of definition with input (encoded to JSON) and drives it until it is
// suspended, blocked or ended. It returns the run ID. opts may be nil.
func (e *Env) Start(ctx context.Context, definition string, input any, opts *StartOptions) (string, error) {
	if opts == nil {
		opts = &StartOptions{}
	}
	in, err := json.Marshal(input)
	if err != nil {
		return "", fmt.Errorf("encoding the input: %w", err)
	}
	spec, err := e.registry().Spec(definition, in)
	if err != nil {
		return "", err
	}
	attrs, err := e.registry().StartAttributes(definition, opts.Attributes)
	if err != nil {
		return "", err
	}
	p := engine.StartParams{RunID: opts.RunID, Spec: spec, Input: in, Queue: opts.Queue, Attributes: attrs, OnConflict: opts.OnConflict,
		Reuse: opts.Reuse, Delay: opts.Delay, DedupKey: opts.DedupKey, DedupWindow: opts.DedupWindow}
	if d := opts.Debounce; d != nil {
		p.Debounce = &engine.Debounce{Key: d.Key, Period: d.Period}
	}
	runID, _, err := e.eng().Start(ctx, p)
	if err != nil {
		return runID, err
	}
	return runID, e.drain(ctx)
}

// Signal delivers signal name with payload to run runID under a fresh delivery ID, and drives.
func (e *Env) Signal(ctx context.Context, runID, name string, payload any) error {
	return e.SignalWithID(ctx, runID, name, payload, e.deliveryID("signal"))
}

// SignalWithID delivers a signal under deliveryID; a repeated delivery ID is accepted once.
func (e *Env) SignalWithID(ctx context.Context, runID, name string, payload any, deliveryID string) error {
	p, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encoding the signal payload: %w", err)
	}
	if _, err := e.eng().Signal(ctx, runID, name, p, deliveryID); err != nil {
		return err
	}
	return e.drain(ctx)
}

// DeliverHook delivers payload to the hook token routes to, under a fresh delivery ID, and
// drives.
func (e *Env) DeliverHook(ctx context.Context, token string, payload any) error {
	return e.DeliverHookWithID(ctx, token, payload, e.deliveryID("hook"))
}

// DeliverHookWithID delivers payload to a hook under deliveryID.
func (e *Env) DeliverHookWithID(ctx context.Context, token string, payload any, deliveryID string) error {
	p, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encoding the hook payload: %w", err)
	}
	if _, err := e.eng().DeliverHook(ctx, token, p, deliveryID); err != nil {
		return err
	}
	return e.drain(ctx)
}

// Cancel requests cancellation of run runID and drives.
func (e *Env) Cancel(ctx context.Context, runID, reason string) error {
	if _, err := e.eng().Cancel(ctx, runID, reason); err != nil {
		return err
	}
	return e.drain(ctx)
}

// Terminate ends run runID as failed, as an operator would, and drives.
func (e *Env) Terminate(ctx context.Context, runID, reason string) error {
	if _, err := e.eng().Terminate(ctx, runID, reason); err != nil {
		return err
	}
	return e.drain(ctx)
}

// Resume drives run runID again, as a worker does when a task is redelivered.
func (e *Env) Resume(ctx context.Context, runID string) error {
	e.enqueue(runID)
	return e.drain(ctx)
}

func (e *Env) enqueue(runID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.queued[runID] {
		e.queued[runID] = true
		e.queue = append(e.queue, runID)
	}
}

// Advance moves the virtual clock forward by d, firing every timer that falls due on the way in
// due order, each at its due time, and driving the runs it resumes.
func (e *Env) Advance(ctx context.Context, d time.Duration) error {
	e.mu.Lock()
	target := e.now.Add(d)
	e.mu.Unlock()
	for {
		t, ok := e.nextTimer(target)
		if !ok {
			break
		}
		if err := e.eng().Fire(ctx, t); err != nil {
			return fmt.Errorf("firing timer %s of run %q: %w", t.Key(), t.RunID, err)
		}
		if err := e.drain(ctx); err != nil {
			return err
		}
	}
	e.mu.Lock()
	if target.After(e.now) {
		e.now = target
	}
	e.mu.Unlock()
	return nil
}

// nextTimer removes and returns the earliest timer due by target, moving the clock to its due
// time.
func (e *Env) nextTimer(target time.Time) (core.Timer, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var next core.Timer
	var key string
	for k, t := range e.timers {
		if t.Due.After(target) {
			continue
		}
		if key == "" || t.Due.Before(next.Due) || t.Due.Equal(next.Due) && k < key {
			next, key = t, k
		}
	}
	if key == "" {
		return core.Timer{}, false
	}
	delete(e.timers, key)
	if next.Due.After(e.now) {
		e.now = next.Due
	}
	return next, true
}

// drain applies the consequences of every commit, as the history service does, and drives
// queued runs, until nothing is left to do.
func (e *Env) drain(ctx context.Context) error {
	e.driving.Lock()
	defer e.driving.Unlock()
	for {
		e.mu.Lock()
		if len(e.commits) > 0 {
			c := e.commits[0]
			e.commits = e.commits[1:]
			e.mu.Unlock()
			if err := e.follow(ctx, c); err != nil {
				return fmt.Errorf("applying the commit of run %q at seq %d: %w", c.RunID, c.First, err)
			}
			continue
		}
		if len(e.queue) == 0 {
			e.mu.Unlock()
			return nil
		}
		runID := e.queue[0]
		e.queue = e.queue[1:]
		delete(e.queued, runID)
		e.mu.Unlock()
		_, err := e.eng().Drive(ctx, runID, 0)
		var wrongBuild *engine.WrongBuildError
		var unknown *engine.UnknownDefinitionError
		if errors.As(err, &wrongBuild) || errors.As(err, &unknown) {
			continue // a worker of the run's build and definition would take it; this code never decides it
		}
		if err != nil {
			return fmt.Errorf("driving run %q: %w", runID, err)
		}
	}
}

// follow applies what commit c implies outside its run, given the run's latest projection.
func (e *Env) follow(ctx context.Context, c store.Commit) error {
	envs, err := c.Events()
	if err != nil {
		return err
	}
	s := e.followed[c.RunID]
	switch {
	case s != nil && s.Seq >= c.Last:
	case s != nil && s.Seq == c.First-1:
		err = s.ApplyAll(envs)
	default:
		s, err = e.eng().Snapshot(ctx, c.RunID)
	}
	if err != nil {
		return err
	}
	e.followed[c.RunID] = s
	return e.eng().ApplyCommit(ctx, s, envs)
}

// Now returns the virtual time.
func (e *Env) Now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

// Snapshot returns the projection of run runID, as flow.Client.Snapshot shows it.
func (e *Env) Snapshot(ctx context.Context, runID string) (*flow.Snapshot, error) {
	s, err := e.eng().Snapshot(ctx, runID)
	if err != nil {
		return nil, err
	}
	return sdk.SnapshotView(s).(*flow.Snapshot), nil
}

// History returns the events of run runID.
func (e *Env) History(ctx context.Context, runID string) ([]event.Envelope, error) {
	hist, err := e.store.Load(ctx, runID, 0)
	if err == nil && len(hist) == 0 {
		err = fmt.Errorf("%w: run %q", flow.ErrNotFound, runID)
	}
	return hist, err
}

// Result decodes the output of run runID into out, following continuations to the run that
// ended. For a run that did not complete it returns a *flow.RunError.
func (e *Env) Result(ctx context.Context, runID string, out any) error {
	for {
		s, err := e.Snapshot(ctx, runID)
		if err != nil {
			return err
		}
		if s.Status == flow.StatusContinuedAsNew {
			runID = s.Outcome.SuccessorRunID
			continue
		}
		return flow.DecodeResult(s, out)
	}
}

// Runs returns the IDs of every run in the store, sorted.
func (e *Env) Runs() []string { return slices.Sorted(slices.Values(e.store.Runs())) }

// PendingTimers returns the registered timers that have not fired, earliest first.
func (e *Env) PendingTimers() []core.Timer {
	e.mu.Lock()
	defer e.mu.Unlock()
	ts := slices.Collect(maps.Values(e.timers))
	slices.SortFunc(ts, func(a, b core.Timer) int {
		return cmp.Or(a.Due.Compare(b.Due), cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.Key(), b.Key()))
	})
	return ts
}

// OnStep replaces step function name with fn for the runs of this Env.
func (e *Env) OnStep(name string, fn StepFunc) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mocks[name] = fn
}

// StepCalls returns how many attempts of step function name have run.
func (e *Env) StepCalls(name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[name]
}

func (e *Env) deliveryID(kind string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.deliveries++
	return fmt.Sprintf("flowtest-%s-%d", kind, e.deliveries)
}

// The methods below make Env the engine's host (through hostView) and clock.

func (e *Env) eng() *engine.Engine {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.engine
}

// registry returns the deployed registry's runtime.
func (e *Env) registry() sdk.Runtime {
	e.mu.Lock()
	defer e.mu.Unlock()
	return sdk.RuntimeOf(e.reg)
}

// runtimeView is the engine's runtime: the deployed registry, with the Env's step mocks.
type runtimeView struct {
	*Env
	reg sdk.Runtime
}

// Identity implements engine.Runtime.
func (r runtimeView) Identity(definition string) (core.Identity, error) {
	return r.reg.Identity(definition)
}

// RunWorkflow implements engine.Runtime.
func (r runtimeView) RunWorkflow(definition string, input json.RawMessage, history *core.Snapshot) (core.Decision, error) {
	return r.reg.RunWorkflow(definition, input, history)
}

// RunStep implements engine.Runtime: a mock if one is installed, else the registered function.
func (r runtimeView) RunStep(ctx context.Context, a core.Attempt) core.StepOutcome {
	r.mu.Lock()
	r.calls[a.Name]++
	mock, ok := r.mocks[a.Name]
	r.mu.Unlock()
	if !ok {
		return r.reg.RunStep(ctx, a)
	}
	out, err := mock(ctx, a.Input)
	if err != nil {
		return core.StepOutcome{Err: &event.ErrorInfo{Kind: flow.KindOf(err), Message: err.Error()}, NonRetryable: flow.IsNonRetryable(err)}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return core.StepOutcome{Err: &event.ErrorInfo{Kind: flow.KindInvalidOutput, Message: err.Error()}, NonRetryable: true}
	}
	return core.StepOutcome{Output: b}
}

// ScheduleTimers implements engine.Host.
func (e *Env) ScheduleTimers(_ context.Context, ts []core.Timer) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range ts {
		e.timers[t.RunID+"/"+t.Key()] = t
	}
	return nil
}

// DeleteTimers implements engine.Host.
func (e *Env) DeleteTimers(_ context.Context, ts []core.Timer) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range ts {
		delete(e.timers, t.RunID+"/"+t.Key())
	}
	return nil
}

// ReleaseHook implements engine.Host: the token keeps routing to the ended run (a late
// redelivery is a duplicate) until another run's hook takes it.
func (e *Env) ReleaseHook(_ context.Context, token, runID, hookID string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hooks[token] == [2]string{runID, hookID} {
		e.released[token] = true
	}
	return nil
}

// RegisterHook implements engine.Host.
func (e *Env) RegisterHook(_ context.Context, token, runID, hookID string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if owner, ok := e.hooks[token]; ok && owner != [2]string{runID, hookID} && !e.released[token] {
		return &engine.TokenTakenError{RunID: owner[0], HookID: owner[1]}
	}
	if e.hooks[token] != [2]string{runID, hookID} {
		delete(e.released, token)
	}
	e.hooks[token] = [2]string{runID, hookID}
	return nil
}

// LookupHook implements engine.Host.
func (e *Env) LookupHook(_ context.Context, token string) (string, string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	owner, ok := e.hooks[token]
	if !ok {
		return "", "", fmt.Errorf("%w: no hook has token %q", flow.ErrNotFound, token)
	}
	return owner[0], owner[1], nil
}

// hostView is the engine's view of Env as its host: Resume queues the run for the operation
// in progress to drive, instead of driving it at once.
type hostView struct{ *Env }

var _ engine.Host = hostView{}

// Resume implements engine.Host.
func (h hostView) Resume(_ context.Context, t engine.Task) error {
	h.enqueue(t.RunID)
	return nil
}
