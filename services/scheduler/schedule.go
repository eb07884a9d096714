package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/internal/liveness"
	"github.com/flowrun/flow/internal/runsindex"
	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/internal/schedule/schedstore"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
)

// Schedules (docs/schedules.md) are fired by the replica that holds the schedules lease, from
// the FLOW_SCHEDULES bucket:
//
//  1. The replica watches the bucket and keeps every schedule in memory with its revision; it
//     sleeps until the earliest fire time of a slot (schedule.Schedule.Wake), a change of an
//     entry (a new schedule, a trigger, a pause), or the poll interval while runs it started
//     are active.
//  2. A round of a schedule (schedule.Schedule.Round) reads the states of the runs it started,
//     following each one's chain (continuations and resets, schedule_chain.go), and returns the
//     effects to execute: runs to start, each with a run ID derived from the schedule's name
//     and the slot, and runs to cancel or terminate. While runs it started are active (or
//     actions wait for them), a schedule has a round every poll interval, so that its state
//     shows an ended run, and starts the action buffered behind it, within that interval.
//  3. The replica executes them in order, starting each run at expected sequence 0, and only
//     then stores the schedule's new state by compare-and-set at the revision it read.
//
// A crash anywhere repeats the round from the stored state: a run already started is found
// (run.started exists at sequence 1) and recorded as the slot's run, never started twice;
// cancellations and terminations change nothing the second time. A write that lost the
// compare-and-set (a client paused the schedule meanwhile) reads the entry again and repeats
// the round the same way. The repeat finds such a run even where it does not come to its
// action: a buffered action whose run exists counts as started, though a paused schedule does
// not drain it (torture finding N7).

// schedulesLease is the schedule runner's key in FLOW_LEASES: a lease of its own, so that
// schedules, timers and admission may lead in different replicas.
const schedulesLease = "schedules"

// SchedulePollDefault is how often a schedule whose runs are active looks at them.
const SchedulePollDefault = time.Second

// scheduleRunner is the schedule runner described above. It runs while its replica holds the
// schedules lease (schedulesLease), and serves the door of the changes of schedules the ingress
// forwards meanwhile (schedule_door.go).
//
// Reads and writes: FLOW_SCHEDULES (schedstore), of which it is the one writer, each write a
// compare-and-set. Reads the runs' histories and the runs index (FLOW_RUNS) for the chains of
// the runs it started, and the workers' definitions (liveness); writes the runs it starts,
// cancels or terminates, through the engine.
type scheduleRunner struct {
	logger *slog.Logger
	faults *fault.Injector
	// poll is Config.SchedulePoll.
	poll time.Duration

	// Set by wire, before Run.
	nc        *nats.Conn
	js        jetstream.JetStream
	schedules *schedstore.Store
	// runs is the runs index, read for the tombstones of deleted runs (schedule_chain.go).
	runs   *runsindex.Store
	store  *jsstore.Store
	engine *engine.Engine
	// defs is the view of the workers and definitions while it leads.
	defs *liveness.View

	// actions counts the effects its rounds stored; door is set while it serves its door.
	actions atomic.Int64
	door    atomic.Bool
}

func newScheduleRunner(cfg Config, logger *slog.Logger) *scheduleRunner {
	r := &scheduleRunner{logger: logger, faults: cfg.Faults, poll: cfg.SchedulePoll}
	if r.poll <= 0 {
		r.poll = SchedulePollDefault
	}
	return r
}

// trackedSchedule is what the runner keeps of one schedule.
type trackedSchedule struct {
	sch *schedule.Schedule
	t   *schedule.Timing
	rev uint64
	// retryAt holds back a schedule whose last round failed.
	retryAt time.Time
	// lookedAt is when its last round ran: a poll round follows a poll interval later.
	lookedAt time.Time
}

// wire hands the runner its connection, repository, the runs index, the store and the engine,
// before Run.
func (r *scheduleRunner) wire(nc *nats.Conn, js jetstream.JetStream, schedules *schedstore.Store, runs *runsindex.Store,
	st *jsstore.Store, e *engine.Engine) {
	r.nc, r.js, r.schedules, r.runs, r.store, r.engine = nc, js, schedules, runs, st, e
}

// FiringSchedules reports whether this replica holds the schedules lease and fires schedules.
func (s *Scheduler) FiringSchedules() bool { return s.schedulesLease.Leading() }

// Run watches FLOW_SCHEDULES and runs each schedule's rounds when due, and serves the door of
// the changes the ingress forwards (schedule_door.go), until ctx ends (nil) or the watch fails
// (why).
func (r *scheduleRunner) Run(ctx context.Context) error {
	closeDoor, err := r.serveDoor()
	if err != nil {
		return err
	}
	defer closeDoor()
	defs, err := liveness.Watch(ctx, r.js, r.logger)
	if err != nil {
		return unlessStopped(ctx, fmt.Errorf("cannot watch the workers and definitions: %w", err))
	}
	defer defs.Stop()
	r.defs = defs
	w, err := r.schedules.Watch(ctx)
	if err != nil {
		return unlessStopped(ctx, fmt.Errorf("cannot watch schedules: %w", err))
	}
	defer func() { _ = w.Stop() }()
	tracked := map[string]*trackedSchedule{}
	loaded := false
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		if loaded {
			now := time.Now()
			next := now.Add(time.Hour)
			for name, ts := range tracked {
				at, immediately, poll := ts.sch.Wake(ts.t, now)
				due := (immediately || poll && !ts.lookedAt.Add(r.poll).After(now)) && !ts.retryAt.After(now)
				if due {
					r.round(ctx, name, ts, now)
					if ctx.Err() != nil {
						return nil
					}
					ts.lookedAt = now
					at, immediately, poll = ts.sch.Wake(ts.t, time.Now())
				}
				switch {
				case immediately && ts.retryAt.After(now):
					next = minTime(next, ts.retryAt)
				case immediately:
					next = now // a bounded round left more to do
				case !at.IsZero():
					next = minTime(next, at)
				}
				if poll {
					next = minTime(next, ts.lookedAt.Add(r.poll))
				}
			}
			wake.Reset(max(time.Until(next), 0))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake.C:
		case e, ok := <-w.Updates():
			if !ok {
				return unlessStopped(ctx, errors.New("the schedules watch ended"))
			}
			if e == nil {
				loaded = true
				continue
			}
			r.apply(e, tracked)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// apply folds one bucket change into the tracked schedules.
func (r *scheduleRunner) apply(e *schedstore.Entry, tracked map[string]*trackedSchedule) {
	if e.Deleted {
		delete(tracked, e.Key)
		return
	}
	if cur, ok := tracked[e.Key]; ok && cur.rev >= e.Revision {
		return // our own write, applied already
	}
	if e.Err != nil {
		r.logger.Error("ignoring a malformed schedule entry", slog.String("schedule", e.Key), slog.String("error", e.Err.Error()))
		delete(tracked, e.Key)
		return
	}
	tracked[e.Key] = &trackedSchedule{sch: e.Value.Schedule, t: e.Value.Timing, rev: e.Revision}
}

// errDeleted reports a schedule deleted while its round ran.
var errDeleted = errors.New("the schedule was deleted")

// roundAttempts bounds the rounds of one schedule that lose the compare-and-set in a row.
const roundAttempts = 8

// round runs one round of schedule name: it executes the round's effects, then stores the
// state at the revision it was computed from. A round that fails leaves the stored state as it
// was, and is tried again a poll interval later.
func (r *scheduleRunner) round(ctx context.Context, name string, ts *trackedSchedule, now time.Time) {
	// A round that began finishes, up to roundTimeout, even if the runner is stopped or loses
	// its lease meanwhile: a run it started is recorded in the state by the same round, so a
	// graceful stop never leaves a started slot for the next leader to find.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), roundTimeout)
	defer cancel()
	err := r.roundOnce(rctx, name, ts, now)
	if err == nil {
		ts.retryAt = time.Time{}
		return
	}
	if errors.Is(err, errDeleted) {
		ts.retryAt = time.Now().Add(r.poll) // until the watch brings the deletion
		return
	}
	if ctx.Err() == nil {
		r.logger.Warn("a schedule's round failed; retrying", slog.String("schedule", name), slog.String("error", err.Error()),
			slog.Duration("in", r.poll))
	}
	ts.retryAt = time.Now().Add(r.poll)
}

// roundTimeout bounds a round of one schedule.
const roundTimeout = 30 * time.Second

func (r *scheduleRunner) roundOnce(ctx context.Context, name string, ts *trackedSchedule, now time.Time) error {
	for range roundAttempts {
		// Work on a copy: what is tracked stays the stored state until the write succeeds.
		data, err := json.Marshal(ts.sch)
		if err != nil {
			return err
		}
		var sch schedule.Schedule
		if err := json.Unmarshal(data, &sch); err != nil {
			return err
		}
		var readErr error
		effects, changed := sch.Round(ts.t, now, func(id string) schedule.Run {
			run, err := r.runChain(ctx, id)
			if err != nil && readErr == nil {
				readErr = err
			}
			return run
		})
		if readErr != nil {
			return readErr
		}
		for _, eff := range effects {
			if err := r.execute(ctx, &sch, eff, now); err != nil {
				return err
			}
		}
		if len(effects) > 0 {
			if err := r.faults.Hit(fault.ScheduleAfterStartBeforeState); err != nil {
				return err
			}
		}
		if !changed {
			return nil
		}
		rev, err := r.schedules.Save(ctx, &sch, ts.rev)
		if err == nil {
			ts.sch, ts.rev = &sch, rev
			r.actions.Add(int64(len(effects)))
			return nil
		}
		if !errors.Is(err, schedstore.ErrConflict) {
			return fmt.Errorf("storing the state of schedule %q: %w", name, err)
		}
		// Changed meanwhile (paused, triggered, deleted): read it again and repeat the round.
		fresh, t, rev, gerr := r.schedules.Load(ctx, name)
		if errors.Is(gerr, schedstore.ErrNotFound) {
			return errDeleted
		}
		if gerr != nil {
			return gerr
		}
		*ts = trackedSchedule{sch: fresh, t: t, rev: rev}
	}
	return fmt.Errorf("schedule %q changed under %d rounds in a row", name, roundAttempts)
}

// execute carries out one effect of sch's round. A start refused for good (the run ID taken by
// a run with another input, a definition never registered) is recorded in sch as failed; an
// error that may pass (NATS unreachable) is returned, and the round is tried again.
func (r *scheduleRunner) execute(ctx context.Context, sch *schedule.Schedule, eff schedule.Effect, now time.Time) error {
	e := r.engine
	switch eff.Kind {
	case schedule.CancelRun:
		_, err := e.Cancel(ctx, eff.RunID, eff.Reason)
		if err != nil && !errors.Is(err, core.ErrTerminal) && !errors.Is(err, core.ErrNotFound) {
			return fmt.Errorf("cancelling run %q: %w", eff.RunID, err)
		}
		return nil
	case schedule.TerminateRun:
		_, err := e.Terminate(ctx, eff.RunID, eff.Reason)
		if err != nil && !errors.Is(err, core.ErrTerminal) && !errors.Is(err, core.ErrNotFound) {
			return fmt.Errorf("terminating run %q: %w", eff.RunID, err)
		}
		return nil
	}
	if err := r.faults.Hit(fault.ScheduleBeforeStart); err != nil {
		return err
	}
	def, derr := r.defs.Require(sch.Queue, sch.Definition)
	if derr != nil && !errors.Is(derr, liveness.ErrNoWorker) {
		return derr
	}
	if derr != nil && def.UpdatedAt.IsZero() {
		// No worker ever registered it on this queue (a definition of a queue that is gone):
		// its runs would wait for code that does not exist.
		sch.StartFailed(eff.RunID, fmt.Sprintf("no worker has registered definition %q on queue %q", sch.Definition, queueName(sch.Queue)), now)
		return nil
	}
	ref := eff.Ref
	control, cerr := limits.Resolve(sch.Definition, def.Control, nil, sch.Input)
	if cerr != nil {
		sch.StartFailed(eff.RunID, cerr.Error(), now)
		return nil
	}
	_, created, err := e.Start(ctx, engine.StartParams{RunID: eff.RunID, Spec: event.Spec{Definition: sch.Definition, BuildID: def.BuildID, Patches: def.Patches},
		Input: sch.Input, Queue: sch.Queue, Control: control, Schedule: &ref})
	switch {
	case errors.Is(err, engine.ErrRunExists), errors.Is(err, core.ErrInvalidInput), errors.Is(err, event.ErrInvalidID):
		sch.StartFailed(eff.RunID, err.Error(), now)
		return nil
	case err != nil:
		return fmt.Errorf("starting run %q of schedule %q: %w", eff.RunID, sch.Name, err)
	}
	r.logger.Debug("schedule started a run", slog.String("schedule", sch.Name), slog.String("run_id", eff.RunID),
		slog.Time("slot", ref.Slot), slog.String("action", string(ref.Action)), slog.Bool("created", created))
	return nil
}

func queueName(q string) string {
	if q == "" {
		return streams.DefaultQueue
	}
	return q
}
