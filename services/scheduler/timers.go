package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/heartbeats"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/timerindex"
	"github.com/flowrun/flow/pkg/event"
)

// timerFirer fires Flow's durable timers: waits (Sleep, WaitUntil), retry backoffs, delayed
// starts and schedule-to-start timeouts. It runs while its replica holds the scheduler's lease
// (leaseKey), beside the heartbeat watcher.
//
// Reads: FLOW_TIMERS (timerindex), which the history service alone writes as it follows the
// history stream, registering every pending timer and deleting each entry once a commit makes
// its timer moot; the history stream, for the runs' first and last commits and, as a core NATS
// subscription to flow.history.>, for the commits as they are published; FLOW_HEARTBEATS, for
// the starts that make a schedule-to-start timer moot; FLOW_TASKS, for a task of a run whose
// timer it handed off.
//
// Writes: the firing events (wait.fired, step.retry_fired, ...) to the runs' histories, through
// the engine, at the expected sequence, and the resume tasks as a fast path (the history
// service derives them too). It never writes FLOW_TIMERS: the firing's commit makes the entry
// moot, and the history service deletes it.
//
// A run's own timers (waits and retry backoffs, core.OwnTimers) are handed off when due: the
// firer sends the run a resume task naming the timer (engine.HandOff), and the worker that takes
// it fires the timer in one commit with the decision that follows. Once HandOffGrace has passed
// with the timer still pending, the firer fires it itself, unless a task of the run still waits
// in FLOW_TASKS, in which case it looks again after twice as long (up to a minute).
//
// It keeps the pending timers in memory in due order (one goroutine for all of them, none per
// run). A timer learnt of from its commit (a hint) fires only once its run's history shows the
// commit, and its entry, when the history service writes it, is only forgotten. Timers falling
// due within the preload window have their runs read ahead: the run's first and last commits,
// two direct gets, when the timer's event is the run's last (the firing is then one append
// right after it), else the run's snapshot. Up to fireCap timers fire at once. A timer never
// fires before it is due. Nothing is missed across restarts: the bucket is durable, and a
// leader that starts fires every overdue timer at once, in due order. Firing twice never
// changes history: the core appends a firing only while the timer is pending in the run's
// history. Precision is that of the Go runtime timer, well under a second.
type timerFirer struct {
	logger *slog.Logger
	// fireCap, preloadCap, preloadMax, preloadWindow and ignoreCommits are Config's
	// FireConcurrency, PreloadConcurrency, PreloadMax, PreloadWindow and IgnoreCommits.
	fireCap, preloadCap, preloadMax int
	preloadWindow                   time.Duration
	ignoreCommits                   bool
	// grace is Config.HandOffGrace: negative for no hand-off.
	grace time.Duration

	// Set by wire, before Run.
	nc     *nats.Conn
	index  *timerindex.Index
	beats  *heartbeats.Store
	tasks  jetstream.Stream
	store  *jsstore.Store
	engine *engine.Engine

	// watch opens the watch on FLOW_TIMERS; nil means index.Watch. Tests replace it.
	watch func(context.Context) (*timerindex.Watcher, error)

	// fired counts the timers fired (or found moot); handedOff those handed to their runs'
	// workers (handOff).
	fired, handedOff atomic.Int64
	// waited counts the looks at handed-off timers that found a task of their run waiting.
	waited atomic.Int64
	// pendingTimers is the number of timers the leader keeps pending; seenEntries counts the
	// timer entries its watch brought (for tests).
	pendingTimers, seenEntries atomic.Int64
	// hints counts the timers learnt of from their commits before their entries, and
	// unconfirmed those of them dropped because their runs' tails did not show their commits.
	hints, unconfirmed atomic.Int64
	// following is set while the leader follows the history stream's commits.
	following atomic.Bool
}

func newTimerFirer(cfg Config, logger *slog.Logger) *timerFirer {
	return &timerFirer{logger: logger, fireCap: cfg.FireConcurrency, preloadCap: cfg.PreloadConcurrency, preloadMax: cfg.PreloadMax,
		preloadWindow: cfg.PreloadWindow, ignoreCommits: cfg.IgnoreCommits, grace: cfg.HandOffGrace}
}

// wire hands the firer its connection, repositories, store and engine, before Run.
func (fr *timerFirer) wire(nc *nats.Conn, index *timerindex.Index, beats *heartbeats.Store, tasks jetstream.Stream,
	st *jsstore.Store, e *engine.Engine) {
	fr.nc, fr.index, fr.beats, fr.tasks, fr.store, fr.engine = nc, index, beats, tasks, st, e
}

// Fired returns the number of timers the firer fired (or found moot).
func (fr *timerFirer) Fired() int64 { return fr.fired.Load() }

// HandedOff returns the number of timers handed to their runs' workers.
func (fr *timerFirer) HandedOff() int64 { return fr.handedOff.Load() }

// attemptStarted reports whether a worker recorded the start of timer t's attempt (a
// schedule-to-start timer) in FLOW_HEARTBEATS: the timer is then moot.
func (fr *timerFirer) attemptStarted(ctx context.Context, t core.Timer) (bool, error) {
	entry, rev, err := fr.beats.Get(ctx, t.RunID, t.ID)
	if errors.Is(err, heartbeats.ErrMalformed) {
		return false, nil // an entry that does not decode records no start
	}
	if err != nil || rev == 0 {
		return false, err
	}
	return entry.Attempt >= t.Attempt, nil
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
	// fireAt is set once the timer was handed to its run's workers (handOff): the scheduler
	// fires it itself from then on, if it is still pending and no task of its run waits;
	// looks counts the times it found one waiting.
	fireAt time.Time
	looks  int
}

// when is when p is next handled: its due time, or, once handed off, when the scheduler fires
// it itself.
func (p *pending) when() time.Time {
	if !p.fireAt.IsZero() {
		return p.fireAt
	}
	return p.timer.Due
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
	if at, bt := a.when(), b.when(); !at.Equal(bt) {
		return at.Before(bt)
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
	// handOff asks for the timer to be handed to its run's workers rather than fired; handed
	// reports that it was, or that a task of its run still waits (queued). recheck says that it
	// was handed off and looks for such a task before it fires.
	handOff, handed, queued, recheck bool
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

// pendingSet is the leader's pending set: every timer of the bucket, by key, in the heap of timers
// to fire (due) until handed to a fire worker, and in the heap of timers to preload (ahead)
// until handed to a preload worker. It is owned by serve's goroutine.
type pendingSet struct {
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

func newPendingSet() *pendingSet {
	return &pendingSet{byKey: map[string]*pending{}, due: timerHeap{at: byDue}, ahead: timerHeap{at: byAhead},
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
func (ts *pendingSet) add(p *pending) {
	p.due, p.ahead = -1, -1
	ts.byKey[p.key] = p
	heap.Push(&ts.due, p)
	if !p.done {
		heap.Push(&ts.ahead, p)
	}
}

// forget stops keeping p (it fired, or its entry went).
func (ts *pendingSet) forget(p *pending) {
	delete(ts.byKey, p.key)
	ts.due.remove(p)
	ts.ahead.remove(p)
	ts.unload(p)
}

// unload clears p's preloaded mark.
func (ts *pendingSet) unload(p *pending) {
	if p.preloaded {
		p.preloaded = false
		ts.preloaded--
	}
}

// Run watches the bucket and fires timers as they fall due, until ctx ends (it returns nil)
// or the watch cannot be opened or ends (it returns why). Timers falling due within the
// preload window have their runs read into the engine's cache ahead of time (Engine.Preload),
// so that firing one is a single append; a timer fires when it is due, never before, whether
// its preload finished or not.
func (fr *timerFirer) Run(ctx context.Context) error {
	watch := fr.watch
	if watch == nil {
		watch = fr.index.Watch
	}
	w, err := watch(ctx)
	if err != nil {
		return unlessStopped(ctx, fmt.Errorf("cannot watch timers: %w", err))
	}
	defer func() { _ = w.Stop() }()
	hints := make(chan core.Timer, hintBuffer)
	if !fr.ignoreCommits {
		layout := fr.store.Layout()
		sub, err := fr.nc.Subscribe(streams.AllRuns, func(m *nats.Msg) {
			if t, ok := hintOf(layout, m); ok {
				select {
				case hints <- t:
				default: // a hint only: the timer's entry still comes
				}
			}
		})
		if err == nil {
			// Once the server knows of the subscription, every commit published reaches it.
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = fr.nc.FlushWithContext(fctx)
			cancel()
		}
		if err != nil {
			if sub != nil {
				_ = sub.Unsubscribe()
			}
			return unlessStopped(ctx, fmt.Errorf("cannot follow the history stream's commits: %w", err))
		}
		fr.following.Store(true)
		defer func() { fr.following.Store(false); _ = sub.Unsubscribe() }()
	}

	ts := newPendingSet()
	fireCap, preloadCap, aheadCap := fr.fireCap, fr.preloadCap, fr.preloadMax
	window := fr.preloadWindow
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
				f.err = fr.fire(ctx, f.p.timer, &f)
				results <- f
			}
		})
	}
	for range preloadCap {
		workers.Go(func() {
			for job := range preloads {
				job.tail = fr.preload(ctx, job.t, job.hint)
				preloaded <- job
			}
		})
	}
	defer func() { close(queue); close(preloads); workers.Wait() }()
	inflight, preloading := 0, 0
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()

	for {
		fr.pendingTimers.Store(int64(len(ts.byKey)))
		now := time.Now()
		// Hand every due timer to the fire workers, as far as they have room.
		for ts.due.Len() > 0 && !ts.due.peek().when().After(now) && inflight < fireCap {
			p := heap.Pop(&ts.due).(*pending)
			ts.ahead.remove(p)
			ts.unload(p)
			p.firing = true
			inflight++
			queue <- firing{p: p, rev: p.rev, done: p.done, tail: p.tail, handOff: fr.mayHandOff(p), recheck: !p.fireAt.IsZero()}
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
			next = time.Until(ts.due.peek().when())
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
				return unlessStopped(ctx, errWatchEnded)
			}
			if e == nil {
				fr.logger.Debug("timers loaded", slog.Int("pending", len(ts.byKey)))
				continue
			}
			fr.seenEntries.Add(1)
			fr.apply(e, ts)
		case t := <-hints:
			key := timerindex.Key(t)
			_, known := ts.byKey[key]
			if _, fired := ts.fired.m[key]; !known && !fired {
				fr.hints.Add(1)
				ts.add(&pending{key: key, timer: t})
			}
		case r := <-results:
			inflight--
			r.p.firing = false
			cur, ok := ts.byKey[r.p.key]
			switch {
			case !ok || cur != r.p:
			case r.handed:
				// Its run's workers fire it; the scheduler does if it is pending after the grace
				// and no task of the run waits then.
				if r.queued {
					cur.looks++
				}
				cur.fireAt = time.Now().Add(min(fr.grace<<min(cur.looks, 16), max(fr.grace, time.Minute)))
				cur.tail = r.tail
				heap.Push(&ts.due, cur)
			case r.rev == 0 && r.err != nil:
				// A hint that its run's tail did not confirm (a commit the stream refused, or a
				// run that moved on), or whose firing failed: left to its entry, if it comes.
				if errors.Is(r.err, errUnconfirmed) {
					fr.unconfirmed.Add(1)
				} else if ctx.Err() == nil {
					fr.logger.Debug("firing a timer on its commit failed; its entry fires it", slog.String("run_id", r.p.timer.RunID),
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
				fr.logger.Warn("firing a timer failed; retrying in 1s", slog.String("run_id", r.p.timer.RunID),
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
func (fr *timerFirer) apply(e *timerindex.Entry, ts *pendingSet) {
	cur, known := ts.byKey[e.Key]
	if e.Deleted {
		if known {
			// A firing in flight finishes; its result finds the timer gone.
			ts.forget(cur)
		}
		ts.fired.forget(e.Key)
		return
	}
	if e.Err != nil {
		fr.logger.Error("ignoring a malformed timer entry", slog.String("key", e.Key))
		return
	}
	t := e.Value
	if known {
		cur.rev = e.Revision
		if !cur.firing && !cur.timer.Due.Equal(t.Due) {
			cur.timer, cur.fireAt = t, time.Time{}
			ts.due.fix(cur)
			ts.ahead.fix(cur)
		}
		return
	}
	// An entry whose timer fired on its commit's hint already is only forgotten.
	ts.add(&pending{key: e.Key, timer: t, rev: e.Revision, done: ts.fired.take(e.Key, t)})
}

// preload reads ahead what firing timer t will need: the run's tail when the timer's event is
// the run's last (the firing then reads nothing), else, for a timer with an entry, the run's
// snapshot, into the engine's cache. It returns the tail, or nil. A failed preload only means
// that the firing reads.
func (fr *timerFirer) preload(ctx context.Context, t core.Timer, hint bool) *engine.RunTail {
	tail, err := fr.readTail(ctx, t.RunID)
	if err == nil {
		if tail.Fires(t) {
			return &tail
		}
		if hint {
			return nil // the firing confirms it
		}
		err = fr.engine.Preload(ctx, t)
	}
	if err != nil && ctx.Err() == nil {
		fr.logger.Debug("preloading a timer's run failed; firing it reads the run", slog.String("run_id", t.RunID),
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
func (fr *timerFirer) fire(ctx context.Context, t core.Timer, f *firing) error {
	firing := time.Now()
	tail := f.tail
	var err error
	if f.done {
		return nil
	}
	if f.recheck {
		// Handed off: a task of the run that still waits fires it when a worker takes it.
		if queued, err := fr.taskWaits(ctx, t, f); err == nil && queued {
			f.handed, f.queued = true, true
			fr.waited.Add(1)
			return nil
		}
	}
	if f.handOff {
		err := fr.handOff(ctx, t, f)
		if err == nil {
			f.handed = true
			fr.handedOff.Add(1)
			return nil
		}
		if errors.Is(err, errUnconfirmed) {
			return err
		}
		if ctx.Err() == nil {
			fr.logger.Debug("handing a timer to its run's workers failed; firing it", slog.String("run_id", t.RunID),
				slog.String("timer", t.Key()), slog.String("error", err.Error()))
		}
	}
	if t.Kind == core.TimerStepStart {
		// A schedule-to-start timer is moot once a worker recorded the attempt's start.
		started, serr := fr.attemptStarted(ctx, t)
		if serr != nil || started {
			return serr
		}
	}
	switch {
	case f.rev == 0:
		if tail == nil || !tail.Fires(t) {
			if tail, err = fr.confirm(ctx, t); err != nil {
				return err
			}
		}
		err = fr.engine.FireOnTail(ctx, t, *tail)
	case tail != nil:
		err = fr.engine.FireOnTail(ctx, t, *tail)
	default:
		// Not preloaded (yet): the run's tail is two direct gets, where reading its history
		// scans every message of the runs committed in between.
		if rt, rerr := fr.readTail(ctx, t.RunID); rerr == nil && rt.Fires(t) {
			err = fr.engine.FireOnTail(ctx, t, rt)
		} else {
			err = fr.engine.Fire(ctx, t)
		}
	}
	if err != nil && !errors.Is(err, core.ErrNotFound) && !errors.Is(err, core.ErrTerminal) && !errors.Is(err, store.ErrDeleted) {
		return err
	}
	fr.fired.Add(1)
	lateness := firing.Sub(t.Due)
	metrics.TimerLateness(ctx, string(t.Kind), lateness.Seconds())
	fr.logger.Debug("timer fired", slog.String("run_id", t.RunID), slog.String("timer", t.Key()),
		slog.Duration("lateness", lateness))
	return nil
}

// mayHandOff reports whether p, falling due, goes to its run's workers first: a wait or a
// retry backoff (the timers a driver fires itself, core.OwnTimers) not handed off yet, unless
// hand-offs are off.
func (fr *timerFirer) mayHandOff(p *pending) bool {
	own := p.timer.Kind == core.TimerWait || p.timer.Kind == core.TimerRetry
	return fr.grace > 0 && own && p.fireAt.IsZero() && !p.done
}

// handOff sends the run of t, a wait or a retry backoff that fell due, a resume task: the
// worker that takes it fires t in one commit with the decision that follows (engine, due.go).
// A hint (f.rev 0) is handed off only on a tail that shows its commit.
func (fr *timerFirer) handOff(ctx context.Context, t core.Timer, f *firing) error {
	tail := f.tail
	if tail == nil {
		rt, err := fr.readTail(ctx, t.RunID)
		if err != nil {
			return err
		}
		tail = &rt
	}
	if f.rev == 0 && !tail.Fires(t) {
		return errUnconfirmed
	}
	f.tail = tail
	return fr.engine.HandOff(ctx, t, *tail)
}

// taskWaits reports whether a task of the run of t, a timer handed off, waits in FLOW_TASKS,
// queued or taken by a worker that has not settled it: the drive it causes fires t.
func (fr *timerFirer) taskWaits(ctx context.Context, t core.Timer, f *firing) (bool, error) {
	tail := f.tail
	if tail == nil {
		rt, err := fr.readTail(ctx, t.RunID)
		if err != nil {
			return false, err
		}
		tail = &rt
		f.tail = tail
	}
	_, err := fr.tasks.GetLastMsgForSubject(ctx, streams.TaskSubject(tail.Queue, tail.Build, t.RunID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	return err == nil, err
}

// errNoRun reports a run whose history holds no commit (yet, on the replica that answered).
var errNoRun = errors.New("no commit of the run")

// readTail reads the first and the last commit of run runID with one direct get each: what
// firing a timer of the run needs (engine.RunTail), without reading the history in between,
// which the server would scan through every message of every run committed meanwhile. Any
// replica answers; one that lags may return an earlier last commit, which makes the firing
// read the run from the stream's leader. The store observes the last commit, so that the
// firing appended after it publishes at once.
func (fr *timerFirer) readTail(ctx context.Context, runID string) (engine.RunTail, error) {
	history, err := fr.store.HistoryOf(ctx, runID)
	if err != nil {
		return engine.RunTail{}, err
	}
	subject := fr.store.Layout().Subject(runID)
	first, err := history.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return engine.RunTail{}, errNoRun
	}
	if err != nil {
		return engine.RunTail{}, err
	}
	started, err := commitEvents(runID, first)
	if err != nil {
		return engine.RunTail{}, err
	}
	rs, ok := started[0].Payload.(*event.RunStarted)
	if !ok || started[0].Seq != 1 {
		return engine.RunTail{}, fmt.Errorf("%w: run %q does not begin with run.started", event.ErrMalformed, runID)
	}
	tail := engine.RunTail{Queue: rs.Queue, Build: rs.Spec.BuildID, TraceParent: rs.TraceParent, Last: started[len(started)-1],
		Commit: started, Position: first.Sequence}
	last, err := history.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return engine.RunTail{}, err
	}
	if last.Sequence != first.Sequence {
		events, err := commitEvents(runID, last)
		if err != nil {
			return engine.RunTail{}, err
		}
		tail.Last, tail.Commit, tail.Position = events[len(events)-1], events, last.Sequence
	}
	// The append of a firing right after this commit needs no read of its position.
	fr.store.ObservePosition(runID, tail.Last.Seq, last.Sequence)
	return tail, nil
}

// commitEvents decodes the commit in stream message m of run runID.
func commitEvents(runID string, m *jetstream.RawStreamMsg) ([]event.Envelope, error) {
	c, ok := jsstore.CommitOf(runID, m.Header, m.Data)
	if !ok {
		return nil, fmt.Errorf("%w: stream message %d of run %q has no commit headers", event.ErrMalformed, m.Sequence, runID)
	}
	events, err := c.Events()
	if err == nil && len(events) == 0 {
		err = fmt.Errorf("%w: stream message %d of run %q holds no events", event.ErrMalformed, m.Sequence, runID)
	}
	return events, err
}

// hintBuffer bounds the hints waiting for the leader's loop; more are dropped (their entries
// still come).
const hintBuffer = 8192

// hintOf returns the timer that history message m, a commit as published (the stream may yet
// refuse it), leaves pending if it stands: the wait or retry its last event schedules. Only a
// last event can be fired on its run's tail (engine.RunTail.Fires).
func hintOf(layout streams.Layout, m *nats.Msg) (core.Timer, bool) {
	types := m.Header.Get(jsstore.HeaderTypes)
	switch types[strings.LastIndexByte(types, ',')+1:] {
	case string(event.TypeWaitScheduled), string(event.TypeStepRetryScheduled), string(event.TypeRunStarted), string(event.TypeRunDebounced):
	default:
		return core.Timer{}, false
	}
	runID, ok := layout.RunOf(m.Subject)
	if !ok {
		return core.Timer{}, false
	}
	c, ok := jsstore.CommitOf(runID, m.Header, m.Data)
	if !ok {
		return core.Timer{}, false
	}
	events, err := c.Events()
	if err != nil || len(events) == 0 {
		return core.Timer{}, false
	}
	last := events[len(events)-1]
	switch d := last.Payload.(type) {
	case *event.WaitScheduled:
		return core.Timer{RunID: runID, Kind: core.TimerWait, ID: d.WaitID, Due: d.Deadline, Seq: last.Seq}, true
	case *event.StepRetryScheduled:
		return core.Timer{RunID: runID, Kind: core.TimerRetry, ID: d.StepID, Attempt: d.Attempt, Due: d.Due, Seq: last.Seq}, true
	case *event.RunStarted:
		// A delayed start (start policies): its start timer, keyed by the event's sequence.
		if !d.NotBefore.IsZero() {
			return core.Timer{RunID: runID, Kind: core.TimerStart, ID: strconv.FormatUint(last.Seq, 10), Due: d.NotBefore, Seq: last.Seq}, true
		}
	case *event.RunDebounced:
		return core.Timer{RunID: runID, Kind: core.TimerStart, ID: strconv.FormatUint(last.Seq, 10), Due: d.NotBefore, Seq: last.Seq}, true
	}
	return core.Timer{}, false
}

// confirmFor bounds how long a firing waits for the stream to show a hint's commit: a commit
// reaches subscribers as it is published, and may be stored a moment later (or, on a
// replicated stream, be readable from a replica later still).
const confirmFor = 500 * time.Millisecond

// confirm reads the tail of hint t's run until it shows t's commit as the run's last: it
// returns the tail then, and errUnconfirmed once the run's last event is t's sequence or later
// but not t's commit (the stream refused the commit, or the run moved on), or once confirmFor
// passed. An unconfirmed hint is left to the timer's entry, if the commit stands.
func (fr *timerFirer) confirm(ctx context.Context, t core.Timer) (*engine.RunTail, error) {
	deadline := time.Now().Add(confirmFor)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		tail, err := fr.readTail(ctx, t.RunID)
		switch {
		case err == nil && tail.Fires(t):
			return &tail, nil
		case err == nil && tail.Last.Seq >= t.Seq, time.Now().After(deadline):
			return nil, errUnconfirmed
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
