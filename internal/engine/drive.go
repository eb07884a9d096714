package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// Result is the state a drive left a run in.
type Result struct {
	RunID  string
	Status core.Status
	Seq    uint64
	// WaitingOn describes what a suspended run waits on, as the last decision re-issued it.
	WaitingOn string
	// Err is the decision error of a blocked run: a *core.NonDeterminismError,
	// *core.InvalidDecisionError, *core.PanicError or an unknown definition.
	Err error
}

// WrongBuildError reports a run pinned to a build this engine does not run. Hand the run to a
// worker of that build; this engine never decides it.
type WrongBuildError struct {
	RunID, RunBuild, EngineBuild string
}

func (e *WrongBuildError) Error() string {
	return fmt.Sprintf("flow: run %q is pinned to build %q; this worker runs build %q", e.RunID, e.RunBuild, e.EngineBuild)
}

// Drive runs the replay loop for run runID until the run is suspended (waiting only on time,
// signals, hooks or children), blocked (its decision failed; see Result.Err) or terminal. Step
// attempts in flight are run here, at least once, up to the engine's step concurrency. Drivers
// of one run are serialised within the engine; drivers in different engines converge through
// the store's optimistic concurrency.
//
// An error means the drive stopped early (store unavailable, ctx cancelled, wrong build): nothing
// is lost, and driving the run again later continues from its history.
func (e *Engine) Drive(ctx context.Context, runID string) (Result, error) {
	if e.rt == nil {
		return Result{RunID: runID}, errors.New("engine: Drive needs Config.Runtime")
	}
	rl := e.locks.lock(runID)
	d := &driver{e: e, runID: runID, rl: rl, running: map[string]int{}, results: make(chan attemptResult), done: make(chan struct{})}
	d.stepCtx, d.cancelSteps = context.WithCancel(ctx)
	res, err := d.run(ctx)
	close(d.done)
	d.cancelSteps()
	if d.s != nil {
		e.observe(ctx, d.s)
	}
	e.locks.unlock(runID, rl)
	if err == nil && res.Status.Terminal() {
		// The snapshot of an ended run never changes, so it is safe to read without the lock.
		err = e.afterEnd(ctx, d.s)
	}
	return res, err
}

type driver struct {
	e     *Engine
	runID string
	rl    *runLock
	s     *core.Snapshot
	// replayErr is the verification error of a cold load; the run stays blocked while set.
	replayErr error
	// running maps step IDs to the attempt running in this driver.
	running     map[string]int
	results     chan attemptResult
	done        chan struct{}
	stepCtx     context.Context
	cancelSteps context.CancelFunc
}

type attemptResult struct {
	a   core.Attempt
	out core.StepOutcome
}

func (d *driver) result(waitingOn string, err error) Result {
	return Result{RunID: d.runID, Status: d.s.Status, Seq: d.s.Seq, WaitingOn: waitingOn, Err: err}
}

func (d *driver) run(ctx context.Context) (Result, error) {
	if err := d.load(ctx); err != nil {
		return Result{RunID: d.runID}, err
	}
	for {
		if d.s.Terminal() {
			return d.result("", nil), nil
		}
		verdict, err := d.decide()
		if err != nil {
			blocked, err := d.block(ctx, err)
			if errors.Is(err, store.ErrConflict) {
				if err := d.refresh(ctx); err != nil {
					return d.result("", nil), err
				}
				continue
			}
			return blocked, err
		}
		if !verdict.Waiting() {
			err := d.commitDecision(ctx, verdict.Events)
			if errors.Is(err, errBlockedByHost) {
				return d.result("", err), nil
			}
			if errors.Is(err, store.ErrConflict) {
				err = d.refresh(ctx)
			}
			if err != nil {
				return d.result("", nil), err
			}
			continue
		}
		if err := d.launch(ctx); err != nil {
			return d.result("", nil), err
		}
		if len(d.running) == 0 {
			return d.result(verdict.WaitingOn, nil), nil
		}
		select {
		case r := <-d.results:
			if ctx.Err() != nil {
				// Shutting down: an attempt cut short must not count as a failure.
				return d.result("", nil), ctx.Err()
			}
			err = d.record(ctx, r)
		case <-d.rl.poke:
			err = d.refresh(ctx)
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			return d.result("", nil), err
		}
	}
}

func (d *driver) decide() (core.Verdict, error) {
	if d.replayErr != nil {
		return core.Verdict{}, d.replayErr
	}
	return core.Decide(d.s, d.e.rt, core.DecideOptions{})
}

// load takes the run's snapshot from the cache and reads the events after it, or projects the
// whole history, verifying it by replay and repairing the effects it implies.
func (d *driver) load(ctx context.Context) error {
	e := d.e
	if s, driven := e.cache.get(d.runID); s != nil && driven {
		d.s = s
		return d.refresh(ctx)
	}
	hist, err := e.store.Load(ctx, d.runID, 0)
	if err != nil {
		return fmt.Errorf("loading run %q: %w", d.runID, err)
	}
	if len(hist) == 0 {
		return fmt.Errorf("%w: run %q", core.ErrNotFound, d.runID)
	}
	if rs, ok := hist[0].Payload.(*event.RunStarted); ok && rs.Spec.BuildID != "" && rs.Spec.BuildID != e.buildID {
		return &WrongBuildError{RunID: d.runID, RunBuild: rs.Spec.BuildID, EngineBuild: e.buildID}
	}
	terminal := hist[len(hist)-1].Type().Terminal()
	if e.replayer != nil && !terminal {
		s, err := core.Replay(d.runID, hist, e.replayer, core.DecideOptions{})
		var he *core.HistoryError
		switch {
		case errors.As(err, &he):
			return err
		case err != nil:
			// Not cached: every load verifies again until code that replays the run is deployed.
			d.replayErr = err
			s, err = core.Project(d.runID, hist)
			if err != nil {
				return err
			}
			d.s = s
			return e.repair(ctx, s)
		}
		d.s = s
	} else {
		s, err := core.Project(d.runID, hist)
		if err != nil {
			return err
		}
		d.s = s
	}
	e.cache.put(d.runID, d.s, true)
	return e.repair(ctx, d.s)
}

// refresh applies the events committed after the snapshot.
func (d *driver) refresh(ctx context.Context) error {
	tail, err := d.e.store.Load(ctx, d.runID, d.s.Seq)
	if err == nil {
		err = d.s.ApplyAll(tail)
	}
	if err != nil {
		d.e.cache.drop(d.runID)
		return fmt.Errorf("reading run %q after seq %d: %w", d.runID, d.s.Seq, err)
	}
	return nil
}

// block records decision.failed once per distinct failure and reports the run blocked.
func (d *driver) block(ctx context.Context, decideErr error) (Result, error) {
	e := d.e
	f := core.DecisionFailure(decideErr, e.buildID)
	if !d.s.SameFailure(f) {
		if err := e.commit(ctx, d.s, []event.Payload{f}); err != nil {
			return d.result("", decideErr), err
		}
		e.logger.ErrorContext(ctx, "decision failed; run blocked", slog.String("run_id", d.runID),
			slog.Uint64("seq", d.s.Seq), slog.String("kind", f.Kind), slog.String("code", f.Code), slog.String("detail", f.Detail))
	}
	return d.result("", decideErr), nil
}

// commitDecision appends a decision's events with the effects that must precede (hook tokens)
// and follow (timers, child runs) the append.
func (d *driver) commitDecision(ctx context.Context, events []event.Payload) error {
	e := d.e
	for _, p := range events {
		if h, ok := p.(*event.HookCreated); ok {
			err := e.host.RegisterHook(ctx, h.Token, d.runID, h.HookID)
			if errors.Is(err, ErrTokenTaken) {
				_, err = d.block(ctx, &core.InvalidDecisionError{RunID: d.runID, Code: core.CodeInvalidDecision,
					Detail: fmt.Sprintf("hook %q: token %q already routes to another hook; give the hook a unique token", h.HookID, h.Token)})
				if err == nil {
					err = errBlockedByHost
				}
			}
			if err != nil {
				return err
			}
		}
	}
	if err := e.commit(ctx, d.s, events); err != nil {
		return err
	}
	for _, p := range events {
		e.logger.DebugContext(ctx, "decision committed", slog.String("run_id", d.runID), slog.String("event_type", string(p.EventType())))
	}
	return e.afterCommit(ctx, d.s, events)
}

// errBlockedByHost stops a drive whose decision the host refused after recording why.
var errBlockedByHost = errors.New("flow: decision refused by the host; run blocked")

// afterCommit registers the timers and starts the child runs that committed events imply.
func (e *Engine) afterCommit(ctx context.Context, s *core.Snapshot, events []event.Payload) error {
	if ts := core.NewTimers(s.RunID, events); len(ts) > 0 {
		if err := e.host.ScheduleTimers(ctx, ts); err != nil {
			return fmt.Errorf("scheduling timers of run %q: %w", s.RunID, err)
		}
	}
	for _, p := range events {
		if c, ok := p.(*event.ChildScheduled); ok {
			for _, spec := range c.Children {
				if err := e.startChild(ctx, s, spec); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// launch starts the attempts in flight that this driver is not running yet. If none is running
// it waits for a step slot, so that a run with attempts in flight never returns as suspended.
func (d *driver) launch(ctx context.Context) error {
	for _, a := range core.Attempts(d.s) {
		if _, ok := d.running[a.StepID]; ok {
			continue
		}
		if len(d.running) == 0 {
			select {
			case d.e.slots <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
		} else {
			select {
			case d.e.slots <- struct{}{}:
			default:
				return nil
			}
		}
		d.running[a.StepID] = a.Attempt
		go d.runAttempt(a)
	}
	return nil
}

func (d *driver) runAttempt(a core.Attempt) {
	defer func() { <-d.e.slots }()
	out := d.e.rt.RunStep(d.stepCtx, a)
	select {
	case d.results <- attemptResult{a: a, out: out}:
	case <-d.done:
	}
}

// record commits the result of an attempt, unless the run moved on without it.
func (d *driver) record(ctx context.Context, r attemptResult) error {
	delete(d.running, r.a.StepID)
	for {
		events, err := core.StepResult(d.s, r.a.StepID, r.a.Attempt, r.out, d.e.now(d.s))
		if errors.Is(err, core.ErrStale) {
			return nil
		}
		if err != nil {
			return err
		}
		err = d.e.commit(ctx, d.s, events)
		if errors.Is(err, store.ErrConflict) {
			if err := d.refresh(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("recording step %q attempt %d of run %q: %w", r.a.StepID, r.a.Attempt, d.runID, err)
		}
		if r.out.Err != nil {
			d.e.logger.WarnContext(ctx, "step attempt failed", slog.String("run_id", d.runID), slog.String("step_id", r.a.StepID),
				slog.Int("attempt", r.a.Attempt), slog.String("error", r.out.Err.Error()))
		}
		return d.e.afterCommit(ctx, d.s, events)
	}
}
