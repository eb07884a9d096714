package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/metrics"
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
	// *core.InvalidDecisionError or *core.PanicError.
	Err error
}

// WrongBuildError reports a run pinned to a build this engine does not run. Hand the run to a
// worker of that build; this engine never decides it.
type WrongBuildError struct {
	RunID, RunBuild, EngineBuild string
	// Definition and Queue are the run's.
	Definition, Queue string
}

func (e *WrongBuildError) Error() string {
	return fmt.Sprintf("flow: run %q is pinned to build %q; this worker runs build %q", e.RunID, e.RunBuild, e.EngineBuild)
}

// UnknownDefinitionError reports a run whose definition this engine's code does not register.
// The engine never decides it (nor records anything in it): a worker that runs the definition
// does.
type UnknownDefinitionError struct {
	RunID, Definition, Queue string
	// RunBuild is the build the run is pinned to, if any.
	RunBuild string
}

func (e *UnknownDefinitionError) Error() string {
	return fmt.Sprintf("flow: run %q is a run of workflow definition %q, which this worker does not register", e.RunID, e.Definition)
}

// Drive runs the replay loop for run runID until the run is suspended (waiting only on time,
// signals, hooks or children), blocked (its decision failed; see Result.Err) or terminal. It
// reads the history up to at least sequence minSeq (a task's sequence), even from a lagging
// replica. Step attempts in flight are run here, at least once, up to the engine's step
// concurrency. While steps run, the driver follows the run's commits by any writer (signals,
// timers, cancellation) and decides on them at once; an attempt that is no longer in flight
// (its step was cancelled) has its context cancelled. Drivers of one run are serialised within
// the engine; drivers in different engines converge through the store's optimistic concurrency.
//
// An error means the drive stopped early (store unavailable, ctx cancelled, wrong build,
// unknown definition, damaged history): nothing is lost, and driving the run again later
// continues from its history.
func (e *Engine) Drive(ctx context.Context, runID string, minSeq uint64) (Result, error) {
	return e.drive(ctx, Task{RunID: runID, Seq: minSeq})
}

// DriveTask is Drive for the run and sequence task t names. The commit the task carries
// (Task.Head) is applied instead of reading the run, when it is the run's next commit after the
// cached snapshot, or, for a run not cached, its first.
//
// A task that hands off a timer (Engine.HandOff) needs no drive once the timer is not pending:
// the run ended (as a drive of this engine saw), or the cached snapshot or the run as read
// shows the timer fired. Whoever fired it drives the run on, backed by a task of its own. An
// offered task (Task.Offered) of a run this engine saw end needs no drive either.
func (e *Engine) DriveTask(ctx context.Context, t Task) (Result, error) {
	if _, ok := handedOff(t); ok || t.Offered {
		if res, ended := e.ended.get(t.RunID); ended {
			return res, nil
		}
	}
	return e.drive(ctx, t)
}

// Ended reports whether this engine saw run runID end (a bounded set of the latest such runs).
func (e *Engine) Ended(runID string) bool {
	_, ok := e.ended.get(runID)
	return ok
}

// drive drives the run task t names.
func (e *Engine) drive(ctx context.Context, t Task) (Result, error) {
	runID, minSeq := t.RunID, t.Seq
	if e.rt == nil {
		return Result{RunID: runID}, errors.New("engine: Drive needs Config.Runtime")
	}
	if t.Backing != nil {
		ctx = context.WithValue(ctx, backingKey{}, t.Backing)
	}
	rl := e.locks.lock(runID)
	d := &driver{e: e, runID: runID, rl: rl, running: map[attemptKey]*attemptRun{},
		results: make(chan attemptResult), done: make(chan struct{}), heard: make(chan struct{}, 1), acked: make(chan error, 1)}
	d.stepCtx, d.cancelSteps = context.WithCancel(ctx)
	// FirstDelivery: the task is a new run's first delivery (see Task.FirstDelivery).
	d.head, d.firstWriter, d.release, d.backing = t.Head, t.FirstDelivery && t.Seq == 1, t.Release, t.Backing
	d.dueKey, _ = handedOff(t)
	res, err := d.run(ctx, minSeq)
	if d.pending() {
		// The drive stopped with commits in flight or buffered: the snapshot is ahead of the
		// store, and the next drive reads the run.
		e.cache.drop(runID)
	}
	close(d.done)
	d.cancelSteps()
	e.locks.unlock(runID, rl)
	if err == nil && res.Status.Terminal() {
		// An ended run is never driven again: the cache holds runs that may be resumed.
		e.cache.drop(runID)
		e.ended.put(runID, res)
		// The snapshot of an ended run never changes, so it is safe to read without the lock.
		if err = e.faults.Hit(fault.AfterTerminalBeforeEnd); err == nil {
			err = e.afterEnd(ctx, d.s)
		}
	}
	return res, err
}

// Join hands task t to its run's active driver in this engine, if there is one, and reports
// whether it did: that driver then reads the run up to at least the task's sequence before it
// stops, so the task needs no drive of its own. A task that hands off a timer (Engine.HandOff)
// joins without waking the driver: the driver fires the run's own timers when due itself, and
// the task holds nothing else for it to read. Nor does an offered task (Task.Offered): a new
// run's first, whose run.started every driver of the run holds.
func (e *Engine) Join(t Task) bool {
	if _, ok := handedOff(t); ok || t.Offered {
		return e.locks.driving(t.RunID)
	}
	return e.locks.join(t.RunID, t.Seq)
}

type attemptKey struct {
	step    string
	attempt int
}

// attemptRun is an attempt running in this driver.
type attemptRun struct {
	cancel context.CancelFunc
	// detached is set when the workflow abandoned the attempt's step (ctx.CancelStep with
	// abandon): its context then outlives the drive (see launch).
	detached *atomic.Bool
	// gen tells this run of the attempt from a later one of the same step and attempt number
	// (after a failed pipelined append, see pipeline.go): a result whose gen is not the
	// running one's is ignored.
	gen uint64
	// at is the snapshot's sequence when the attempt started, and epoch the driver's epoch
	// then: the commit that scheduled it is durable once the store acknowledged sequence at in
	// that epoch (see driver.valid).
	at    uint64
	epoch int
}

type driver struct {
	e     *Engine
	runID string
	rl    *runLock
	s     *core.Snapshot
	// replayErr is the verification error of a cold load; the run stays blocked while set.
	replayErr error
	// head is the commit the task carried, applied instead of reading it from the store.
	head *Head
	// waiting is the code's waiting verdict on the snapshot at seq, kept by record so that the
	// drive loop does not ask the code again for the same snapshot.
	waiting *waitingVerdict
	// limited is set when an attempt in flight found no slot of its step's limit.
	limited *StepLimitedError
	// definition is the run's workflow and decideName the name of its decision spans: both set
	// once loaded (traced), before any attempt starts.
	definition, decideName string
	// running holds the attempts this driver runs.
	running map[attemptKey]*attemptRun
	// gens numbers the attempts started here.
	gens        uint64
	baseCtx     context.Context
	results     chan attemptResult
	done        chan struct{}
	stepCtx     context.Context
	cancelSteps context.CancelFunc

	// inflight is the commit whose append is in flight, buffer the commits recorded since,
	// acked where the append's outcome arrives (pipeline.go). deferred is set when launch held
	// back an attempt until the pipeline settles.
	inflight, buffer *pendingCommit
	acked            chan error
	deferred         bool
	// proven is set once an append of this drive was acknowledged, or from the start for a new
	// run's first writer (firstWriter, with the run at its run.started): the driver owns the
	// run's tail, and steps may start ahead of their commit (mayStart).
	proven, firstWriter bool
	// unconfirmed is set for a first writer whose task has a backing (Task.Backing) not yet
	// asked whether its copy was the task's first: ownsTail asks it once, when a step could
	// start ahead of its commit.
	unconfirmed bool
	backing     func() (bool, error)
	// epoch counts the pipeline's refused appends; epochEnds[i] is the sequence the store had
	// acknowledged when epoch i ended (a refused append read the run again).
	epoch     int
	epochEnds []uint64

	// heard is signalled when a commit notice arrives; notices holds them. stopFollow ends the
	// subscription, once there is one; graceTimer times followAfter.
	heard      chan struct{}
	mu         sync.Mutex
	notices    []store.Commit
	stopFollow func()
	graceTimer *time.Timer

	// due caches the earliest due time of the run's own timers, dueTimer wakes wait when it
	// comes, and heldFor is the due time the drive last held for; release is the task's
	// Release; dueKey is the key of the timer the task hands off, "" for another task (due.go).
	due      dueCache
	dueTimer *time.Timer
	heldFor  time.Time
	release  func()
	dueKey   string
}

type attemptResult struct {
	a   core.Attempt
	out core.StepOutcome
	// gen, at and epoch are the attemptRun's.
	gen, at uint64
	epoch   int
}

func (d *driver) result(waitingOn string, err error) Result {
	return Result{RunID: d.runID, Status: d.s.Status, Seq: d.s.Seq, WaitingOn: waitingOn, Err: err}
}

func (d *driver) run(ctx context.Context, minSeq uint64) (Result, error) {
	defer d.unfollow()
	if err := d.load(ctx, minSeq); err != nil {
		return Result{RunID: d.runID}, err
	}
	if d.dueKey != "" && !ownPending(d.s, d.dueKey) {
		// The timer the task hands off fired: its firer drives the run on.
		if more, err := d.more(ctx); err != nil || !more {
			return d.result("", nil), err
		}
	}
	first := d.firstWriter && d.s.Seq == 1
	d.proven, d.unconfirmed = first && d.backing == nil, first && d.backing != nil
	ctx = d.traced(ctx)
	// No attempt has started yet: attempts run in the traced context, which names their run
	// and their spans' parent once per drive.
	d.cancelSteps()
	d.stepCtx, d.cancelSteps = context.WithCancel(ctx)
	d.baseCtx = ctx
	for {
		d.cancelStale()
		if d.s.Terminal() {
			if again, err := d.settled(ctx); err != nil || again {
				if err != nil {
					return d.result("", nil), err
				}
				continue
			}
			return d.result("", nil), nil
		}
		if p, ok := d.held(); ok {
			if again, err := d.settled(ctx); err != nil || again {
				if err != nil {
					return d.result("", nil), err
				}
				continue
			}
			// A definition or queue pause: no decision, no new attempt; the attempts running
			// here finish and record their results, then the worker parks the run.
			if d.live() == 0 {
				return d.result("", nil), d.heldError(p)
			}
			if err := d.wait(ctx, false); err != nil {
				return d.result("", nil), err
			}
			continue
		}
		if fired, err := d.fireDue(ctx); errors.Is(err, store.ErrConflict) {
			continue // read again: look at the run as it is
		} else if err != nil {
			return d.result("", nil), err
		} else if fired {
			continue
		}
		began := time.Now()
		verdict, err := d.verdict()
		if err == nil && !verdict.Waiting() && d.pipeable(verdict.Events) && !d.full(0, len(verdict.Events), 0) {
			if err := d.pipeDecision(ctx, began, verdict.Events); err != nil {
				return d.result("", nil), err
			}
			continue
		}
		if err != nil || !verdict.Waiting() {
			// What follows commits at the snapshot's sequence, or stops the drive.
			if again, serr := d.settled(ctx); serr != nil || again {
				if serr != nil {
					return d.result("", nil), serr
				}
				continue
			}
		}
		if err != nil {
			blocked, err := d.block(ctx, began, err)
			if errors.Is(err, store.ErrConflict) {
				err = d.refreshAfter(ctx, err)
			} else if err == nil {
				// A later commit or a joined task may let the run go on (a cancellation): decide
				// on what more read instead of returning blocked without deciding on it.
				more, err := d.more(ctx)
				if err != nil || !more {
					return blocked, err
				}
			}
			if err != nil {
				return d.result("", nil), err
			}
			continue
		}
		if !verdict.Waiting() {
			err := d.commitDecision(ctx, began, verdict.Events)
			if errors.Is(err, errBlockedByHost) {
				// As for a failed decision: go on if more read a later commit or joined task.
				more, merr := d.more(ctx)
				if merr != nil || !more {
					return d.result("", err), merr
				}
				continue
			}
			if errors.Is(err, store.ErrConflict) {
				err = d.refreshAfter(ctx, err)
			}
			if err != nil {
				return d.result("", nil), err
			}
			continue
		}
		d.limited, d.deferred = nil, false
		if err := d.launch(ctx); err != nil {
			return d.result("", nil), err
		}
		if d.live() == 0 {
			if again, err := d.settled(ctx); err != nil || again || d.deferred {
				if err != nil {
					return d.result("", nil), err
				}
				continue
			}
		}
		if d.live() == 0 && d.limited != nil {
			// Its attempts wait for step slots: the run waits without holding this worker.
			return d.result("step limit", nil), d.limited
		}
		if d.live() == 0 && d.holdDue() {
			// A timer of the run falls due soon: fire it here rather than hand the run back
			// and wait for the scheduler's task. The run slot is free meanwhile.
			if d.release != nil {
				d.release()
				d.release = nil
			}
			err := d.wait(ctx, true)
			d.e.holding.Add(-1)
			if err != nil {
				return d.result("", nil), err
			}
			continue
		}
		if d.live() == 0 {
			more, err := d.more(ctx)
			if err != nil {
				return d.result("", nil), err
			}
			if more {
				continue
			}
			return d.result(verdict.WaitingOn, nil), nil
		}
		if err := d.wait(ctx, true); err != nil {
			return d.result("", nil), err
		}
	}
}

// followAfter is how long a driver waits for its steps before it follows the run's commits by
// other writers: steps that return sooner cost no subscription.
const followAfter = 2 * time.Millisecond

// wait returns once the run changed while its attempts run: an attempt's result was recorded,
// or another writer committed (a signal, a timer, a cancellation); or, with due, once one of
// the run's own timers fell due, for the drive loop to fire (due.go). Attempts that outlast
// followAfter make the driver follow the run's commits (store.Follower) until the drive ends.
func (d *driver) wait(ctx context.Context, due bool) error {
	var grace <-chan time.Time
	if d.stopFollow == nil {
		if d.graceTimer == nil {
			d.graceTimer = time.NewTimer(followAfter)
		} else {
			d.graceTimer.Reset(followAfter)
		}
		defer d.graceTimer.Stop()
		grace = d.graceTimer.C
	}
	var dueC <-chan time.Time
	if due {
		var stop func()
		dueC, stop = d.dueTimerC()
		defer stop()
	}
	for {
		var acked <-chan error
		if d.inflight != nil {
			acked = d.acked
		}
		select {
		case <-dueC:
			return nil // the drive loop fires what is due
		case appendErr := <-acked:
			// Once the pipeline is idle the drive loop starts what waited for it.
			changed, err := d.ackArrived(ctx, appendErr)
			if err != nil || changed || d.inflight == nil {
				return err
			}
		case <-grace:
			grace = nil
			if !d.follow() {
				continue
			}
			// Commits made before the subscription took effect reach no one: read them.
			if changed, err := d.settled(ctx); err != nil || changed {
				return err
			}
			before := d.s.Seq
			if err := d.refresh(ctx, 0); err != nil || d.s.Seq > before {
				return err
			}
		case r := <-d.results:
			if ctx.Err() != nil {
				// Shutting down: an attempt cut short must not count as a failure.
				return ctx.Err()
			}
			return d.record(ctx, r)
		case <-d.heard:
			// A notice is only a hint, never applied as it came: a publish the stream refused
			// (another writer won the sequence) reaches subscribers too, so what was committed
			// is read from the store, from the leader if a replica lags. A notice can also
			// arrive before the stream stored its commit; whoever made that commit sends the
			// run a task, so a driver that stops before reading it loses nothing. Notices up
			// to the snapshot's sequence are of the pipeline's own commits, or of another
			// writer's, which make the pipeline's next append conflict and are read then.
			heard := d.takeNotices()
			if heard <= d.s.Seq {
				continue
			}
			if changed, err := d.settled(ctx); err != nil || changed {
				return err
			}
			if heard > d.s.Seq {
				return d.refresh(ctx, heard)
			}
		case <-d.rl.poke:
			if _, err := d.settled(ctx); err != nil {
				return err
			}
			return d.refresh(ctx, 0)
		case reply := <-d.rl.reads:
			// A reader (a query) wants the run's state while its steps run: a copy of what is
			// committed, made between two changes, that it owns.
			if _, err := d.settled(ctx); err != nil {
				reply <- nil
				return err
			}
			reply <- d.s.Clone()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// more reports whether the driver must go on instead of stopping at the run's current
// sequence, because a commit notice or a joined task names a later one: it then reads it.
// When it reports false the driver is no longer the run's active driver.
func (d *driver) more(ctx context.Context) (bool, error) {
	if heard := d.takeNotices(); heard > d.s.Seq {
		return true, d.refresh(ctx, heard)
	}
	want, left := d.e.locks.leave(d.rl, d.s.Seq)
	if left {
		return false, nil
	}
	return true, d.refresh(ctx, want)
}

// verdict returns the verdict of the code on the run's current snapshot: the one record
// obtained while committing the results that led to it, if any, else a new decision.
func (d *driver) verdict() (core.Verdict, error) {
	if events := d.unrunCancelled(); events != nil {
		return core.Verdict{Events: events}, nil
	}
	if w := d.waiting; w != nil && w.seq == d.s.Seq {
		d.waiting = nil
		return w.v, nil
	}
	d.waiting = nil
	return d.decide()
}

// decide asks the code for the run's next decision. A run whose cancellation was requested and
// whose code cannot decide (blocked by a replay check, a non-determinism error, a panic) is
// cancelled, as the operator asked.
func (d *driver) decide() (core.Verdict, error) {
	err := d.replayErr
	if err == nil {
		var v core.Verdict
		if v, err = core.Decide(d.s, d.e.rt, core.DecideOptions{}); err == nil {
			return v, nil
		}
	}
	if d.s.CancelRequested && !errors.Is(err, core.ErrTerminal) {
		reason := "cancellation requested while the code could not decide: " + err.Error()
		if d.s.CancelReason != "" {
			reason = "cancellation requested (" + d.s.CancelReason + ") while the code could not decide: " + err.Error()
		}
		return core.Validate(d.s, core.Cancel{Reason: reason, Cause: event.CauseCancelRequested})
	}
	return core.Verdict{}, err
}

// load takes the run's snapshot from the cache and reads the events after it, or projects the
// whole history, verifying it by replay.
func (d *driver) load(ctx context.Context, minSeq uint64) error {
	e := d.e
	if s, driven := e.cache.get(d.runID); s != nil && driven {
		metrics.CacheHit(ctx)
		d.s = s
		if d.dueKey != "" && s.Seq >= minSeq && !ownPending(s, d.dueKey) {
			return nil // the timer the task hands off fired: nothing to read
		}
		if tail := d.fromHead(s.Seq+1, minSeq); tail != nil {
			// The task carried the commits after the snapshot, up to its sequence: what was
			// committed after them makes the next append conflict, and is read then.
			if err := d.s.ApplyAll(tail); err != nil {
				e.cache.drop(d.runID)
				return fmt.Errorf("applying the commit a task carried to run %q: %w", d.runID, err)
			}
			return nil
		}
		return d.refresh(ctx, minSeq)
	}
	metrics.CacheMiss(ctx)
	hist := d.fromHead(1, minSeq)
	if hist == nil {
		s, tail, err := e.fromCheckpoint(ctx, d.runID, minSeq)
		if err == nil {
			return d.loadCheckpointed(ctx, s, tail, minSeq)
		}
		if !errors.Is(err, errNoCheckpoint) {
			return err
		}
		if hist, err = e.store.LoadAtLeast(ctx, d.runID, 0, minSeq); err != nil {
			return fmt.Errorf("loading run %q: %w", d.runID, err)
		}
	}
	if len(hist) == 0 {
		return fmt.Errorf("%w: run %q", core.ErrNotFound, d.runID)
	}
	last := hist[len(hist)-1]
	if err := behind(d.runID, last.Seq, last.Type().Terminal(), minSeq); err != nil {
		return err
	}
	if rs, ok := hist[0].Payload.(*event.RunStarted); ok {
		if err := e.runnable(d.runID, rs.Spec, rs.Queue); err != nil {
			return err
		}
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
			d.s, err = core.Project(d.runID, hist)
			return err
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
	return nil
}

// fromHead returns the events the task carried, when they are the run's from sequence first up
// to at least minSeq, and tells the store where their commit sits; else nil.
func (d *driver) fromHead(first, minSeq uint64) []event.Envelope {
	ps, ok := d.e.store.(store.Positioner)
	if d.head == nil || !ok {
		return nil
	}
	hist, err := event.DecodeEnvelopes(d.head.Events)
	if err != nil || len(hist) == 0 || hist[len(hist)-1].Seq < minSeq {
		return nil
	}
	if last := hist[len(hist)-1]; first > 1 && last.Seq == first-1 && last.RunID == d.runID {
		// The snapshot ends with the commit: there is nothing to apply (a timer handed off).
		ps.ObservePosition(d.runID, last.Seq, d.head.Position)
		return []event.Envelope{}
	}
	for i, e := range hist {
		if e.RunID != d.runID || e.Seq != first+uint64(i) {
			return nil
		}
	}
	ps.ObservePosition(d.runID, hist[len(hist)-1].Seq, d.head.Position)
	return hist
}

// refresh applies the events committed after the snapshot, reading up to at least atLeast.
func (d *driver) refresh(ctx context.Context, atLeast uint64) error {
	tail, err := d.e.store.LoadAtLeast(ctx, d.runID, d.s.Seq, atLeast)
	if err == nil {
		err = d.s.ApplyAll(tail)
	}
	if err != nil {
		d.e.cache.drop(d.runID)
		return fmt.Errorf("reading run %q after seq %d: %w", d.runID, d.s.Seq, err)
	}
	return behind(d.runID, d.s.Seq, d.s.Terminal(), atLeast)
}

// behind returns an error wrapping store.ErrBehind when run runID, read up to sequence seq
// (terminal if its last event ended it), is short of sequence atLeast, which the reader was told
// exists.
func behind(runID string, seq uint64, terminal bool, atLeast uint64) error {
	if seq >= atLeast || terminal {
		return nil
	}
	return fmt.Errorf("%w: run %q read to seq %d, short of seq %d; read it again later", store.ErrBehind, runID, seq, atLeast)
}

// refreshAfter reads what made an append conflict: at least up to the sequence the conflict
// reported, read from the stream's leader where a replica lags.
func (d *driver) refreshAfter(ctx context.Context, conflict error) error {
	var ce *store.ConflictError
	atLeast := uint64(0)
	if errors.As(conflict, &ce) {
		atLeast = ce.Actual
	}
	return d.refresh(ctx, atLeast)
}

// follow subscribes the driver to its run's commit notices, and reports whether it could.
func (d *driver) follow() bool {
	f, ok := d.e.store.(store.Follower)
	if !ok {
		return false
	}
	stop, err := f.Follow(d.runID, d.notice)
	if err != nil {
		return false
	}
	d.stopFollow = stop
	return true
}

func (d *driver) unfollow() {
	if d.stopFollow != nil {
		d.stopFollow()
	}
}

// notice receives a commit notice from the store; it never blocks.
func (d *driver) notice(c store.Commit) {
	d.mu.Lock()
	d.notices = append(d.notices, c)
	d.mu.Unlock()
	select {
	case d.heard <- struct{}{}:
	default:
	}
}

// takeNotices returns the last sequence the commit notices received so far named, and forgets
// them.
func (d *driver) takeNotices() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var last uint64
	for _, c := range d.notices {
		last = max(last, c.Last)
	}
	d.notices = d.notices[:0]
	return last
}

// block records decision.failed once per distinct failure and reports the run blocked. The
// decision began at began.
func (d *driver) block(ctx context.Context, began time.Time, decideErr error) (Result, error) {
	e := d.e
	f := core.DecisionFailure(decideErr, e.buildID)
	if !d.s.SameFailure(f) {
		first, traces, events := d.s.Seq+1, d.s.InputTraces(), []event.Payload{f}
		if err := e.commit(ctx, d.s, events); err != nil {
			return d.result("", decideErr), err
		}
		ctx, span := d.decided(ctx, began, first, events, traces, f)
		defer span.End()
		e.logger.ErrorContext(ctx, "decision failed; run blocked", slog.String("run_id", d.runID),
			slog.Uint64("seq", d.s.Seq), slog.String("kind", f.Kind), slog.String("code", f.Code), slog.String("detail", f.Detail))
	}
	return d.result("", decideErr), nil
}

// commitDecision appends a decision's events, begun at began, with the effects that must precede
// (hook tokens) and may follow (child runs, as a fast path) the append. A decision committed
// here has a span (the drive's only decision spans: a replay commits nothing).
func (d *driver) commitDecision(ctx context.Context, began time.Time, events []event.Payload) error {
	e := d.e
	for _, p := range events {
		if h, ok := p.(*event.HookCreated); ok {
			err := e.registerHook(ctx, h.Token, d.runID, h.HookID)
			if errors.Is(err, ErrTokenTaken) {
				_, err = d.block(ctx, began, &core.InvalidDecisionError{RunID: d.runID, Code: core.CodeInvalidDecision,
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
	first, traces := d.s.Seq+1, d.s.InputTraces()
	if err := e.commit(ctx, d.s, events); err != nil {
		return err
	}
	d.proven = true
	ctx, span := d.decided(ctx, began, first, events, traces, nil)
	defer span.End()
	d.logDecision(ctx, events)
	if err := e.startChildren(ctx, d.s, events); err != nil {
		return err
	}
	// A fast path too, repeated by the history service (ApplyCommit).
	runs := core.ChildCancellations(events)
	if len(runs) == 0 {
		return nil
	}
	if err := e.faults.Hit(fault.AfterDecisionBeforeChildCancel); err != nil {
		return err
	}
	return e.cancelChildren(ctx, d.runID, runs)
}

// logDecision logs the events of a committed decision at debug level.
func (d *driver) logDecision(ctx context.Context, events []event.Payload) {
	if !d.e.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	for _, p := range events {
		d.e.logger.DebugContext(ctx, "decision committed", slog.String("run_id", d.runID), slog.String("event_type", string(p.EventType())))
	}
}

// registerHook routes token to hook hookID of run runID through the host. A token still routed
// to a run that ended (the history service releases it after the end, as a consequence of the
// terminal commit) is released here first. A worker's host asks the history service, FLOW_HOOKS's
// one writer, which claims the token with ClaimHook (the same takeover, on its own host): the
// engine's own release is then the host's no-op, and its second claim asks again.
func (e *Engine) registerHook(ctx context.Context, token, runID, hookID string) error {
	err := e.host.RegisterHook(ctx, token, runID, hookID)
	var taken *TokenTakenError
	if !errors.As(err, &taken) {
		return err
	}
	owner, serr := e.Snapshot(ctx, taken.RunID)
	if serr != nil || !owner.Terminal() {
		return err
	}
	if err := e.host.ReleaseHook(ctx, token, taken.RunID, taken.HookID); err != nil {
		return err
	}
	return e.host.RegisterHook(ctx, token, runID, hookID)
}

// ClaimHook routes token to hook hookID of run runID, create-only: a token that routes to that
// hook already is no error; one that routes to a hook of a run that ended is taken over; one that
// routes to another hook of a live run returns a *TokenTakenError (wrapping ErrTokenTaken). The
// history service answers the workers' claims with it, on an engine whose host writes FLOW_HOOKS.
func (e *Engine) ClaimHook(ctx context.Context, token, runID, hookID string) error {
	return e.registerHook(ctx, token, runID, hookID)
}

// errBlockedByHost stops a drive whose decision the host refused after recording why.
var errBlockedByHost = errors.New("flow: decision refused by the host; run blocked")

// startChildren starts the child runs that committed events schedule: a fast path, repeated by
// the history service (ApplyCommit), so that consecutive generations never wait on it.
func (e *Engine) startChildren(ctx context.Context, s *core.Snapshot, events []event.Payload) error {
	for _, p := range events {
		c, ok := p.(*event.ChildScheduled)
		if !ok {
			continue
		}
		if err := e.faults.Hit(fault.AfterDecisionBeforeChildren); err != nil {
			return err
		}
		for _, spec := range c.Children {
			if err := e.startChild(ctx, s, spec); err != nil {
				return err
			}
		}
	}
	return nil
}

// launch starts the attempts in flight that this driver is not running yet. If none of the
// snapshot's attempts is running here it waits for a step slot, so that a run with attempts in
// flight never returns as suspended.
func (d *driver) launch(ctx context.Context) error {
	if d.holds() {
		// Paused: the attempts in flight start once the pause ends.
		return nil
	}
	for a := range core.InFlightAttempts(d.s) {
		key := attemptKey{a.StepID, a.Attempt}
		if _, ok := d.running[key]; ok {
			continue
		}
		if !d.mayStart(a) {
			d.deferred = true
			continue
		}
		if d.live() == 0 {
			if err := d.e.slots.acquire(ctx, d.s.Priority); err != nil {
				return err
			}
		} else if !d.e.slots.tryAcquire() {
			return nil
		}
		ok, release, err := d.acquire(ctx, a)
		if err != nil || !ok {
			d.e.slots.release()
			if err != nil {
				return err
			}
			continue
		}
		// The attempt's context ends with the drive, unless the workflow abandoned its step
		// meanwhile (detached), and always when the worker stops (baseCtx).
		actx, cancel := context.WithCancel(context.WithoutCancel(d.stepCtx))
		detached := new(atomic.Bool)
		stopDrive := context.AfterFunc(d.stepCtx, func() {
			if !detached.Load() {
				cancel()
			}
		})
		stopBase := context.AfterFunc(d.baseCtx, cancel)
		d.gens++
		run := &attemptRun{cancel: cancel, detached: detached, gen: d.gens, at: d.s.Seq, epoch: d.epoch}
		d.running[key] = run
		go d.runAttempt(actx, a, run, func() {
			release()
			stopDrive()
			stopBase()
		})
	}
	return nil
}

// live counts the attempts running here that are still in flight in the snapshot.
func (d *driver) live() int {
	n := 0
	for k := range d.running {
		if d.inFlight(k) {
			n++
		}
	}
	return n
}

func (d *driver) inFlight(k attemptKey) bool {
	st, ok := d.s.Steps[k.step]
	return ok && !d.s.Terminal() && st.Status == core.StepRunning && st.Attempt == k.attempt
}

// cancelStale cancels the context of every attempt running here that the history settled
// another way (its step was cancelled, or another worker recorded its result), or that the
// workflow asked to cancel (ctx.CancelStep with wait_cancelled). An attempt whose step the
// workflow abandoned is left alone: it is detached from the drive, and its result is ignored.
// This is how a step's cancellation reaches its code: the driver that runs the attempt follows
// the run's history (it committed the cancellation itself, or reads it from the commits of
// other writers), so the cancellation is delivered from the history, not from a message that
// could be lost.
func (d *driver) cancelStale() {
	for k, run := range d.running {
		switch {
		case d.s.AttemptCancelled(k.step, k.attempt):
			run.cancel()
		case d.s.Detached(k.step):
			run.detached.Store(true)
		}
	}
}

// unrunCancelled returns the events that settle the attempts the workflow asked to cancel
// (wait_cancelled) that no one runs here: a driver that loads the run after the worker that ran
// them went does not start them again (core.CancelUnrun). Nil if there are none.
func (d *driver) unrunCancelled() []event.Payload {
	if !d.s.StepCancelsPending() {
		return nil
	}
	var events []event.Payload
	for a := range core.InFlightAttempts(d.s) {
		if _, here := d.running[attemptKey{a.StepID, a.Attempt}]; here || !d.s.CancelAsked(a.StepID, a.Attempt) {
			continue
		}
		if evs, err := core.CancelUnrun(d.s, a.StepID, a.Attempt); err == nil {
			events = append(events, evs...)
		}
	}
	return events
}

// runAttempt runs attempt a and hands its result to the driver. The attempt's step slot is
// released once its code returned, before the hand-over: a driver that waits for a slot
// (launch) is not waiting for its own results.
func (d *driver) runAttempt(ctx context.Context, a core.Attempt, run *attemptRun, release func()) {
	ctx, span := d.stepSpan(ctx, a)
	began := time.Now()
	var out core.StepOutcome
	if in, err := d.e.resolveInput(ctx, a); err != nil {
		out = core.StepOutcome{Err: &event.ErrorInfo{Kind: "payload", Message: "reading the step's input: " + err.Error()}}
	} else if hb := d.e.heartbeats; hb != nil {
		e := d.e
		actx, end := hb.Begin(ctx, a, func(ctx context.Context) (core.AttemptCheck, error) {
			return e.CheckAttempt(ctx, a.RunID, a.StepID, a.Attempt)
		})
		out = d.e.rt.RunStep(actx, in)
		end(&out)
	} else {
		out = d.e.rt.RunStep(ctx, in)
	}
	out = d.e.offloadOutput(ctx, out)
	release()
	d.e.slots.release()
	stepDone(ctx, span, a, out, time.Since(began))
	select {
	case d.results <- attemptResult{a: a, out: out, gen: run.gen, at: run.at, epoch: run.epoch}:
	case <-d.done:
	}
}

// runnable returns a *WrongBuildError if run runID, started with spec on queue, is pinned to a
// build other than the engine's, and an *UnknownDefinitionError if the engine's code does not
// register its definition; else nil.
func (e *Engine) runnable(runID string, spec event.Spec, queue string) error {
	if spec.BuildID != "" && spec.BuildID != e.buildID {
		return &WrongBuildError{RunID: runID, RunBuild: spec.BuildID, EngineBuild: e.buildID,
			Definition: spec.Definition, Queue: queue}
	}
	if _, err := e.rt.Identity(spec.Definition); errors.Is(err, core.ErrNotFound) {
		return &UnknownDefinitionError{RunID: runID, Definition: spec.Definition, Queue: queue, RunBuild: spec.BuildID}
	}
	return nil
}
