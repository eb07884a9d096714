package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	hbstore "github.com/flowrun/flow/internal/heartbeats"
	"github.com/flowrun/flow/pkg/event"
)

// heartbeats records step attempts' starts and heartbeats in FLOW_HEARTBEATS (docs/timeouts.md):
//
//   - an attempt of a step with timeouts writes the step's entry as it starts (its start, its
//     timeouts, the details carried over from the previous heartbeat): the schedule-to-start
//     timer finds the attempt started, and the scheduler's watcher counts the heartbeat and
//     start-to-close deadlines from it;
//   - flow.Heartbeat writes the entry with new details, at most once per interval (0.8 times
//     the heartbeat timeout, and at most a second), and asks the run's history whether the
//     attempt should stop (the run ended or is cancelling, the attempt timed out, the step's
//     cancellation was requested): then it cancels the step's context;
//   - for a step with a heartbeat timeout, a refresher does the same each interval without
//     extending the deadline (it writes only details the step gave and the throttle held back),
//     so that a step that is stuck is still timed out, and a cancellation still reaches it;
//   - the worker's own start-to-close deadline cancels the step's context, and its error then
//     records the start-to-close timeout.
//
// Every write is a compare-and-set on the entry's revision: an attempt that a later one
// superseded (a retry started elsewhere after a timeout) stops instead of overwriting it.
// Workers are the bucket's one writer; the scheduler's watcher only reads it.
type heartbeats struct {
	store  *hbstore.Store
	worker string
	logger *slog.Logger
	faults *fault.Injector
}

// errStartToClose is the cause of a step context whose start-to-close deadline passed.
var errStartToClose = errors.New("the step's start-to-close timeout passed")

// maxBeatInterval caps the interval between two writes of a heartbeating attempt.
const maxBeatInterval = time.Second

// Begin implements engine.Heartbeats.
func (h *heartbeats) Begin(ctx context.Context, a core.Attempt, check func(context.Context) (core.AttemptCheck, error)) (context.Context, func(*core.StepOutcome)) {
	b := &beater{h: h, a: a, check: check, interval: maxBeatInterval}
	to := a.Timeouts
	if to != nil && to.Heartbeat > 0 {
		b.interval = min(maxBeatInterval, time.Duration(to.Heartbeat)*8/10)
	}
	ctx, b.cancel = context.WithCancelCause(ctx)
	stop := func() {}
	started := time.Now()
	if to != nil && to.StartToClose > 0 {
		ctx, stop = context.WithDeadlineCause(ctx, started.Add(time.Duration(to.StartToClose)), errStartToClose)
	}
	if !to.IsZero() {
		if err := b.start(ctx, started); err != nil {
			// The attempt runs unwatched by the scheduler; a retry may not read the details.
			h.logger.Warn("recording a step attempt's start failed", slog.String("run_id", a.RunID),
				slog.String("step_id", a.StepID), slog.Int("attempt", a.Attempt), slog.String("error", err.Error()))
		}
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	if to != nil && to.Heartbeat > 0 {
		wg.Go(func() { b.refresh(ctx, done) })
	}
	return engine.WithBeater(ctx, b), func(out *core.StepOutcome) {
		close(done)
		wg.Wait()
		if out.Err != nil && errors.Is(context.Cause(ctx), errStartToClose) {
			out.Err = &event.ErrorInfo{Kind: event.TimeoutStartToClose,
				Message: fmt.Sprintf("attempt %d: the start-to-close timeout of %s passed: %s", a.Attempt, time.Duration(to.StartToClose), out.Err.Message)}
			out.NonRetryable, out.Timeout = false, event.TimeoutStartToClose
		}
		// Details the throttle held back are written, for the next attempt.
		b.flush(context.WithoutCancel(ctx), false)
		stop()
		b.cancel(nil)
	}
}

// beater is one attempt's engine.Beater.
type beater struct {
	h        *heartbeats
	a        core.Attempt
	check    func(context.Context) (core.AttemptCheck, error)
	interval time.Duration
	cancel   context.CancelCauseFunc

	mu sync.Mutex
	// loaded is set once the entry was read; entry and rev are its latest state as written.
	loaded bool
	entry  engine.HeartbeatEntry
	rev    uint64
	// prev are the details recorded before this attempt started (hasPrev when any).
	prev    json.RawMessage
	hasPrev bool
	// pending are the details of the latest Beat, dirty until written; lastWrite is when.
	pending   json.RawMessage
	dirty     bool
	lastWrite time.Time
	// superseded is set once a later attempt's entry was found: nothing more is written.
	superseded bool
}

// load reads the step's entry, once. b.mu is held.
func (b *beater) load(ctx context.Context) error {
	if b.loaded {
		return nil
	}
	entry, rev, err := b.h.store.Get(ctx, b.a.RunID, b.a.StepID)
	switch {
	case err != nil:
		return err
	case rev == 0:
		b.entry = engine.HeartbeatEntry{RunID: b.a.RunID, StepID: b.a.StepID}
	default:
		b.entry, b.rev = entry, rev
		if b.entry.Attempt > b.a.Attempt {
			b.superseded = true
		}
	}
	if len(b.entry.Details) > 0 {
		b.prev, b.hasPrev = b.entry.Details, true
	}
	b.loaded = true
	return nil
}

// start writes the entry of the attempt that starts at now.
func (b *beater) start(ctx context.Context, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.load(ctx); err != nil {
		return err
	}
	if b.superseded {
		// A later attempt started already: this one's result would be refused.
		b.cancel(fmt.Errorf("attempt %d of step %q started before this attempt %d", b.entry.Attempt, b.a.StepID, b.a.Attempt))
		return nil
	}
	to := b.a.Timeouts
	b.entry.Attempt, b.entry.Started, b.entry.Worker = b.a.Attempt, now.UTC(), b.h.worker
	b.entry.Heartbeat, b.entry.StartToClose = to.Heartbeat, to.StartToClose
	return b.write(ctx)
}

// write writes b.entry at b.rev. b.mu is held.
func (b *beater) write(ctx context.Context) error {
	if b.superseded {
		return nil
	}
	if err := b.h.faults.Hit(fault.HeartbeatPut); err != nil {
		return err
	}
	rev, err := b.h.store.Put(ctx, &b.entry, b.rev)
	if err != nil {
		// Another writer was first: a later attempt (stop), or this attempt's own start on
		// a worker that died (take the entry over).
		cur, curRev, gerr := b.h.store.Get(ctx, b.a.RunID, b.a.StepID)
		if gerr != nil && !errors.Is(gerr, hbstore.ErrMalformed) || curRev == 0 {
			return err
		}
		if gerr == nil && cur.Attempt > b.a.Attempt {
			b.superseded = true
			b.cancel(fmt.Errorf("attempt %d of step %q started after this attempt %d", cur.Attempt, b.a.StepID, b.a.Attempt))
			return nil
		}
		if rev, err = b.h.store.Put(ctx, &b.entry, curRev); err != nil {
			return err
		}
	}
	b.rev, b.lastWrite = rev, time.Now()
	return nil
}

// Beat implements engine.Beater.
func (b *beater) Beat(ctx context.Context, details json.RawMessage) error {
	b.mu.Lock()
	b.pending, b.dirty = details, true
	due := time.Since(b.lastWrite) >= b.interval
	b.mu.Unlock()
	if due {
		b.flush(ctx, true)
	}
	return nil
}

// flush writes the pending details, if any, and with ask checks the run's history for a
// reason to stop the attempt.
func (b *beater) flush(ctx context.Context, ask bool) {
	b.mu.Lock()
	if b.dirty && !b.superseded {
		err := b.load(ctx)
		if err == nil {
			if b.entry.Attempt < b.a.Attempt {
				// No start was recorded (a step without timeouts): this attempt's entry.
				b.entry.Attempt, b.entry.Started, b.entry.Worker = b.a.Attempt, time.Now().UTC(), b.h.worker
			}
			b.entry.Details, b.entry.DetailsAttempt = b.pending, b.a.Attempt
			err = b.write(ctx)
		}
		if err == nil {
			b.dirty = false
		} else if ctx.Err() == nil {
			b.h.logger.Debug("writing a heartbeat failed", slog.String("run_id", b.a.RunID),
				slog.String("step_id", b.a.StepID), slog.String("error", err.Error()))
		}
	}
	b.mu.Unlock()
	if ask {
		b.ask(ctx)
	}
}

// ask cancels the attempt's context when the run's history says it should stop.
func (b *beater) ask(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	c, err := b.check(ctx)
	if err != nil || !c.Cancel {
		return
	}
	b.cancel(errors.New(c.Reason))
}

// refresh flushes held-back details and asks the history every interval until done.
func (b *beater) refresh(ctx context.Context, done <-chan struct{}) {
	t := time.NewTicker(b.interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			b.mu.Lock()
			held := b.dirty && time.Since(b.lastWrite) >= b.interval
			b.mu.Unlock()
			if held {
				b.flush(ctx, true)
			} else {
				b.ask(ctx)
			}
		}
	}
}

// Details implements engine.Beater.
func (b *beater) Details(ctx context.Context) (json.RawMessage, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.load(ctx); err != nil {
		return nil, false, err
	}
	return b.prev, b.hasPrev, nil
}
