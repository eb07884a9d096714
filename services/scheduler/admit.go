package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/runsindex"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// The admission controller admits the runs that started under flow control (run.started records
// an event.FlowControl), one flow-control group at a time, while this replica holds the
// admission lease:
//
//  1. The queue of waiting runs is the FLOW_QUEUE bucket, which the history service derives from
//     history (an entry when a controlled run starts, deleted when it is admitted or ends). The
//     controller watches it: a new leader reads the whole queue first.
//  2. A round reads the group's state in FLOW_LIMITS, repairs the slots it does not know to be
//     admitted (a reservation whose run.admitted was never appended is completed, or given back
//     if its run ended), then picks runs: the highest priority first among the keys whose head
//     run fits every limit of its control, round-robin among keys of equal priority, first come
//     first served within a key. It writes the slots and rate tokens it took by compare-and-set,
//     and only then appends each run's run.admitted, stamped with the time its token was taken.
//  3. A run that arrives while a concurrency limit is full waits (queue), is cancelled
//     (cancel_newest), or has the oldest admitted run of the full scope cancelled for it
//     (cancel_oldest), each cancellation a run.cancelled with cause flow_control.
//  4. The controller is the one writer of FLOW_LIMITS's groups: it releases the slot of a run
//     whose end the runs index (FLOW_RUNS, the history service's projection of history) shows,
//     watching it for the runs that hold slots, in the next round of their group (one
//     compare-and-set releases and admits). It sleeps until a rate token comes back when that is
//     what keeps a run waiting.
//  5. Its reconciler repairs what it missed: when it takes the lease, every slot is checked
//     against its run's history (a reservation whose run.admitted was never appended is
//     completed or given back; an ended run's slot is released), and every ReconcileInterval
//     every slot held is checked against the runs index again. Each repair is counted
//     (flow_repairs_total{state="flow_slots"}) and logged with the run.

// AdmitBatchDefault bounds the runs one round admits.
const AdmitBatchDefault = 256

// admitConcurrency bounds the run.admitted appends in flight at once.
const admitConcurrency = 64

// errRound reports a round that must run again at once: its state changed under it.
var errRound = errors.New("the group's state changed; run the round again")

// queued is a run waiting for admission.
type queued struct {
	w limits.Waiting
	// notBefore is the earliest time to admit it at: set when its latest event was recorded
	// after the time it was last reserved at.
	notBefore time.Time
}

// less orders a key's queue: higher priority first, then first started, then run ID.
func (q *queued) less(o *queued) int {
	if c := cmp.Compare(o.w.Priority, q.w.Priority); c != 0 {
		return c
	}
	if c := q.w.StartedAt.Compare(o.w.StartedAt); c != 0 {
		return c
	}
	return strings.Compare(q.w.RunID, o.w.RunID)
}

// admitGroup is what the controller keeps of one flow-control group.
type admitGroup struct {
	name string
	// keys holds each key's waiting runs in admission order; ring lists the keys with waiting
	// runs in round-robin order, and cursor is where the next pick starts looking.
	keys   map[string][]*queued
	ring   []string
	cursor int
	// verified holds the slot holders known to be admitted in history and not ended when
	// last checked; ended those the runs index showed ended since, to release in the next
	// round (true when a reconciliation found it: a repair).
	verified map[string]bool
	ended    map[string]bool
	// damaged holds the verified holders whose histories are quarantined: each round looks at
	// them again, since accepting the damage may leave one not admitted (queued anew).
	damaged map[string]bool
	// evicting holds the holders cancelled by cancel_oldest, until their slots are released.
	evicting map[string]bool
	// handover holds the ended holders that a reset ended (their index entries name the
	// reset's new run): each one's slot is released once its new run waits in the queue, which
	// keeps the old run's place, so that the turn is the new run's rather than that of whatever
	// waited behind the old run; or holds a slot already, or never will queue (mayQueue), or
	// after handoverGrace.
	handover map[string]handover
	// due is when a rate token keeping a run waiting comes back; zero when none does.
	due time.Time
	// dirty asks for a round.
	dirty bool
}

func newAdmitGroup(name string) *admitGroup {
	return &admitGroup{name: name, keys: map[string][]*queued{}, verified: map[string]bool{}, ended: map[string]bool{}, evicting: map[string]bool{},
		damaged: map[string]bool{}, handover: map[string]handover{}}
}

// handover is the end of a slot holder by a reset: the run the reset created, and when the end
// was seen.
type handover struct {
	to    string
	since time.Time
}

// handoverGrace bounds how long a reset holder's slot waits for the reset's new run to queue.
const handoverGrace = 10 * time.Second

// mayQueue reports whether run id may yet queue for admission: the runs index has no entry of
// it, or shows it queued (or paused, which a queued run may be). A run indexed otherwise
// (admitted, ended, deleted) never will.
func (a *admitter) mayQueue(ctx context.Context, id string) bool {
	e, found, err := a.runs.Get(ctx, id)
	if err != nil || !found {
		return true // not indexed yet (or unreachable): the grace bounds the wait
	}
	sum := e.Value
	return e.Err == nil && (sum.Status == core.StatusQueued || sum.Status == core.StatusPaused) && sum.Deleted == nil
}

func (g *admitGroup) waiting() int {
	n := 0
	for _, q := range g.keys {
		n += len(q)
	}
	return n
}

// add queues q, unless it is queued already.
func (g *admitGroup) add(q *queued) {
	k := q.w.Control.Key
	list := g.keys[k]
	i, found := slices.BinarySearchFunc(list, q, func(a, b *queued) int { return a.less(b) })
	if found {
		return
	}
	if len(list) == 0 {
		g.ring = append(g.ring, k)
	}
	g.keys[k] = slices.Insert(list, i, q)
	g.dirty = true
}

// remove takes run runID of key off the queue, reporting whether it was there.
func (g *admitGroup) remove(key, runID string) bool {
	list := g.keys[key]
	i := slices.IndexFunc(list, func(q *queued) bool { return q.w.RunID == runID })
	if i < 0 {
		return false
	}
	list = slices.Delete(list, i, i+1)
	if len(list) > 0 {
		g.keys[key] = list
		return true
	}
	delete(g.keys, key)
	if r := slices.Index(g.ring, key); r >= 0 {
		g.ring = slices.Delete(g.ring, r, r+1)
		if r < g.cursor {
			g.cursor--
		}
		if g.cursor >= len(g.ring) {
			g.cursor = 0
		}
	}
	return true
}

// admissionController is the admission controller described above. It runs while its replica
// holds the admission lease (admissionLease), a lease of its own so that admission and the
// timers may lead in different replicas.
//
// Reads: FLOW_QUEUE (limits.Queue), whose one writer is the history service; FLOW_RUNS, the
// runs index, for the ends of the runs holding slots; the runs' histories. Writes: FLOW_LIMITS's
// groups (limits.Store), of which it is the one writer, each write a compare-and-set; run.admitted
// and flow-control cancellations, through the engine.
type admissionController struct {
	logger *slog.Logger
	faults *fault.Injector
	// batch and reconcileInterval are Config's AdmitBatch and ReconcileInterval.
	batch             int
	reconcileInterval time.Duration

	// Set by wire, before Run.
	queue  *limits.Queue
	limits *limits.Store
	runs   *runsindex.Store
	engine *engine.Engine

	// admitted and cancelledByControl count its admissions and the runs its policies cancelled.
	admitted           atomic.Int64
	cancelledByControl atomic.Int64
}

// wire hands the controller its repositories, the runs index and the engine, before Run.
func (c *admissionController) wire(queue *limits.Queue, st *limits.Store, runs *runsindex.Store, e *engine.Engine) {
	c.queue, c.limits, c.runs, c.engine = queue, st, runs, e
}

// admitter is the state of the admission controller while it leads.
type admitter struct {
	c      *admissionController
	limits *limits.Store
	groups map[string]*admitGroup
	// byRun finds a queued run's group and key.
	byRun map[string]*queued
	// byKey maps a FLOW_LIMITS key to its group name.
	byKey map[string]string
	// holding maps each run holding a slot, as its group's latest round read it, to its group:
	// the runs whose ends the controller looks for in the runs index.
	holding map[string]string
	// awaiting maps the new run of each handover to the group whose slot waits for it: its
	// runs index updates wake that group.
	awaiting map[string]string
	// runs is the runs index (FLOW_RUNS), which tells the holders' ends.
	runs *runsindex.Store
}

// Run watches the admission queue and the limits, and admits runs, until ctx ends (it returns
// nil) or a watch fails (it returns why).
func (c *admissionController) Run(ctx context.Context) error {
	a := &admitter{c: c, limits: c.limits, groups: map[string]*admitGroup{}, byRun: map[string]*queued{}, byKey: map[string]string{},
		holding: map[string]string{}, awaiting: map[string]string{}, runs: c.runs}
	// The holders' ends: every update of the runs index from now on; what ended before is found
	// by the rounds' repair of the slots this leader has not verified.
	rw, err := c.runs.WatchChanges(ctx)
	if err != nil {
		return unlessStopped(ctx, fmt.Errorf("cannot watch the runs index: %w", err))
	}
	defer func() { _ = rw.Stop() }()
	if err := a.loadGroups(ctx); err != nil {
		return unlessStopped(ctx, err)
	}
	qw, err := c.queue.Watch(ctx)
	if err != nil {
		return unlessStopped(ctx, fmt.Errorf("cannot watch the admission queue: %w", err))
	}
	defer func() { _ = qw.Stop() }()
	lw, err := c.limits.WatchGroups(ctx)
	if err != nil {
		return unlessStopped(ctx, fmt.Errorf("cannot watch the flow-control state: %w", err))
	}
	defer func() { _ = lw.Stop() }()
	loaded := false
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	reconcile := time.NewTicker(c.reconcileInterval)
	defer reconcile.Stop()
	for {
		next := time.Hour
		if loaded {
			now := time.Now()
			for _, g := range a.groups {
				if !g.due.IsZero() && !g.due.After(now) {
					g.due, g.dirty = time.Time{}, true
				}
				if g.dirty {
					g.dirty = false
					if err := a.round(ctx, g); err != nil {
						if ctx.Err() != nil {
							return nil
						}
						if !errors.Is(err, errRound) {
							c.logger.Warn("an admission round failed; retrying", slog.String("group", g.name), slog.String("error", err.Error()))
							g.due = time.Now().Add(200 * time.Millisecond)
						} else {
							g.dirty = true
						}
					}
				}
				if g.dirty {
					next = 0
				} else if !g.due.IsZero() {
					next = min(next, time.Until(g.due))
				}
			}
			for name, g := range a.groups {
				if g.waiting() == 0 && len(g.verified) == 0 && len(g.ended) == 0 && len(g.evicting) == 0 && g.due.IsZero() && !g.dirty {
					delete(a.groups, name)
				}
			}
		}
		wake.Reset(max(next, 0))
		var err error
		select {
		case <-ctx.Done():
			return nil
		case <-wake.C:
		case e, ok := <-qw.Updates():
			err = a.onQueue(e, ok, &loaded)
		case e, ok := <-lw.Updates():
			err = a.onLimits(e, ok)
		case e, ok := <-rw.Updates():
			err = a.onRuns(e, ok)
		case <-reconcile.C:
			a.reconcile(ctx)
		}
		// What else has arrived goes into the next rounds too: a burst of starts is served by
		// one round per group, not one round per start.
	drain:
		for range drainBatch {
			if err != nil {
				break
			}
			select {
			case e, ok := <-qw.Updates():
				err = a.onQueue(e, ok, &loaded)
			case e, ok := <-lw.Updates():
				err = a.onLimits(e, ok)
			case e, ok := <-rw.Updates():
				err = a.onRuns(e, ok)
			default:
				break drain
			}
		}
		if err != nil {
			return unlessStopped(ctx, err)
		}
	}
}

// drainBatch caps the watch updates the admission loop folds in before its next rounds.
const drainBatch = 1024

// onQueue folds one update of the admission queue's watch (ok false: the watch ended, an
// error); nil marks the end of the entries that were there when the watch began.
func (a *admitter) onQueue(e *limits.QueueEntry, ok bool, loaded *bool) error {
	switch {
	case !ok:
		return errors.New("the admission queue watch ended")
	case e == nil:
		*loaded = true
	default:
		a.applyQueue(e)
	}
	return nil
}

// onLimits folds one update of the flow-control state's watch: another leader overlapping this
// one for a moment wrote a group, which the next round reads again.
func (a *admitter) onLimits(e *limits.GroupEntry, ok bool) error {
	if !ok {
		return errors.New("the flow-control state watch ended")
	}
	if e != nil {
		if name, known := a.byKey[e.Key]; known {
			if g := a.groups[name]; g != nil {
				g.dirty = true
			}
		}
	}
	return nil
}

// onRuns folds one update of the runs index's watch: a holder's end.
func (a *admitter) onRuns(e *runsindex.Entry, ok bool) error {
	if !ok {
		return errors.New("the runs index watch ended")
	}
	if e != nil {
		a.applyRun(e)
	}
	return nil
}

// loadGroups makes every group that FLOW_LIMITS holds known to the controller, so that its first
// round checks their slots against history: a new leader releases the slots of runs that ended
// while no controller led.
func (a *admitter) loadGroups(ctx context.Context) error {
	groups, err := a.limits.Groups(ctx)
	if err != nil {
		return err
	}
	for _, name := range groups {
		a.group(name).dirty = true
	}
	return nil
}

// applyRun takes note of a runs index update: the end of a run holding a slot is released in
// its group's next round.
func (a *admitter) applyRun(e *runsindex.Entry) {
	if name, ok := a.awaiting[e.Key]; ok {
		if g := a.groups[name]; g != nil {
			g.dirty = true // a slot handed over to this run may go now (mayQueue)
		}
	}
	name, held := a.holding[e.Key]
	if !held || e.Deleted {
		return
	}
	sum := e.Value
	if e.Err != nil || !(sum.Status.Terminal() || sum.Deleted != nil) {
		return
	}
	g := a.group(name)
	if _, repairing := g.ended[e.Key]; !repairing {
		g.ended[e.Key] = false
	}
	if _, known := g.handover[e.Key]; !known && sum.ResetTo != "" && sum.Deleted == nil {
		g.handover[e.Key] = handover{to: sum.ResetTo, since: time.Now()}
		a.awaiting[sum.ResetTo] = name
	}
	g.dirty = true
}

// reconcile checks every slot the controller's groups hold against the runs index: a holder
// whose end the index shows, and whose end the watch did not bring (it is not marked ended), is
// released as a repair. Reservations (slots whose run is not known to be admitted) are the
// rounds' to repair.
func (a *admitter) reconcile(ctx context.Context) {
	for run, name := range a.holding {
		g := a.groups[name]
		if g == nil || !g.verified[run] {
			continue
		}
		if _, known := g.ended[run]; known {
			continue
		}
		e, found, err := a.runs.Get(ctx, run)
		if err != nil || !found {
			continue // no entry yet, or unreachable: the next reconciliation looks again
		}
		if sum := e.Value; e.Err == nil && (sum.Status.Terminal() || sum.Deleted != nil) {
			g.ended[run], g.dirty = true, true
		}
	}
}

// group returns the group named name, keeping it from now on.
func (a *admitter) group(name string) *admitGroup {
	g := a.groups[name]
	if g == nil {
		g = newAdmitGroup(name)
		a.groups[name] = g
		a.byKey[limits.GroupKey(name)] = name
	}
	return g
}

// applyQueue folds one FLOW_QUEUE change into the waiting runs.
func (a *admitter) applyQueue(e *limits.QueueEntry) {
	if e.Deleted {
		if q, ok := a.byRun[e.Key]; ok {
			a.groups[q.w.Control.Group].remove(q.w.Control.Key, q.w.RunID)
			delete(a.byRun, e.Key)
		}
		return
	}
	if e.Err != nil {
		a.c.logger.Error("ignoring a malformed admission queue entry", slog.String("key", e.Key))
		return
	}
	w := e.Value
	if _, ok := a.byRun[w.RunID]; ok {
		return
	}
	q := &queued{w: w}
	a.byRun[w.RunID] = q
	a.group(w.Control.Group).add(q)
}

// forget takes a run off the queue once it is admitted, cancelled or found moot.
func (a *admitter) forget(g *admitGroup, q *queued) {
	g.remove(q.w.Control.Key, q.w.RunID)
	delete(a.byRun, q.w.RunID)
}

// pick is a run admitted by a round, at the time its token was taken.
type pick struct {
	q  *queued
	at time.Time
}

// round admits what it can of group g.
func (a *admitter) round(ctx context.Context, g *admitGroup) error {
	st, rev, err := a.limits.Load(ctx, g.name)
	if err != nil {
		return err
	}
	a.hold(g, st)
	for run := range g.verified {
		if _, held := st.Holders[run]; !held {
			delete(g.verified, run)
			delete(g.damaged, run)
		}
	}
	for run := range g.evicting {
		if _, held := st.Holders[run]; !held {
			delete(g.evicting, run)
		}
	}
	// The runs index showed these holders ended: their slots go in this round's write, but
	// for those whose reset's new run has yet to queue (handover).
	released := 0
	var handoverDue time.Time
	for run, repair := range g.ended {
		if h, ok := g.handover[run]; ok {
			_, queued := a.byRun[h.to]
			_, holds := st.Holders[h.to] // admitted beside it, in another slot: nothing to wait for
			if !queued && !holds && time.Since(h.since) < handoverGrace && a.mayQueue(ctx, h.to) {
				if due := h.since.Add(handoverGrace); handoverDue.IsZero() || due.Before(handoverDue) {
					handoverDue = due
				}
				continue
			}
			delete(g.handover, run)
			delete(a.awaiting, h.to)
		}
		if st.Release(run) {
			released++
			if repair {
				a.repaired(ctx, g, run, "its end was missed; the reconciler released its slot")
			}
		}
		delete(g.verified, run)
		delete(g.ended, run)
	}
	// Slots this leader does not know to be admitted: a reservation of a controller that died
	// before appending run.admitted is completed, one whose run ended is given back.
	repaired := false
	for run, h := range st.Holders {
		if g.verified[run] && !g.damaged[run] {
			continue
		}
		changed, err := a.repair(ctx, g, run, h)
		if err != nil {
			return err
		}
		repaired = repaired || changed
	}
	if repaired {
		return errRound
	}
	now := time.Now().UTC()
	// Entries no window can count any more go with the next write; a write for them alone
	// would wake every watcher of the group for nothing.
	st.Trim(now)
	picks, cancels, due := a.choose(g, st, now)
	if !handoverDue.IsZero() && (due.IsZero() || handoverDue.Before(due)) {
		due = handoverDue
	}
	g.due = due
	a.c.logger.Debug("admission round", slog.String("group", g.name), slog.Int("waiting", g.waiting()), slog.Int("holders", len(st.Holders)),
		slog.Int("admitting", len(picks)), slog.Int("releasing", released), slog.Int("cancelling", len(cancels)), slog.Time("due", due))
	a.hold(g, st)
	if len(picks) > 0 || released > 0 {
		if _, err := a.limits.Save(ctx, g.name, st, rev); err != nil {
			if errors.Is(err, limits.ErrConflict) {
				return errRound
			}
			return err
		}
	}
	for _, p := range picks {
		a.forget(g, p.q)
	}
	for _, c := range cancels {
		a.cancel(ctx, g, c)
	}
	if len(picks) == 0 {
		return nil
	}
	if err := a.c.faults.Hit(fault.AdmitAfterReserve); err != nil {
		g.dirty = true // the next round finds the reservations unverified and completes them
		return nil
	}
	a.admit(ctx, g, picks)
	g.dirty = true // more may fit: the round stops at its batch
	return nil
}

// hold records the runs holding a slot of group g, as st shows them, as the runs whose ends the
// controller looks for.
func (a *admitter) hold(g *admitGroup, st *limits.State) {
	for run, name := range a.holding {
		if _, held := st.Holders[run]; name == g.name && !held {
			delete(a.holding, run)
		}
	}
	for run := range st.Holders {
		a.holding[run] = g.name
	}
}

// repaired counts and logs a repair of a slot of run runID in group g.
func (a *admitter) repaired(ctx context.Context, g *admitGroup, runID, what string) {
	metrics.Repair(ctx, metrics.StateSlots, 1)
	a.c.logger.Warn("flow-control slot repaired", slog.String("state", metrics.StateSlots), slog.String("group", g.name),
		slog.String("run_id", runID), slog.String("repair", what))
}

// cancellation is a run the policy of a full limit cancels.
type cancellation struct {
	runID, reason string
	// queued is set when the cancelled run is the one waiting (cancel_newest), nil when it
	// holds a slot (cancel_oldest).
	queued *queued
}

// choose picks the runs of g to admit now, taking their slots and tokens in st, and the runs to
// cancel; due is when a rate token keeping a run waiting comes back.
func (a *admitter) choose(g *admitGroup, st *limits.State, now time.Time) (picks []pick, cancels []cancellation, due time.Time) {
	batch := a.c.batch
	// taken counts, per key, the waiting runs this round passed: the key's next candidate.
	taken := map[string]int{}
	// evict holds the holders this round cancels (cancel_oldest).
	evict := map[string]bool{}
	head := func(k string) *queued {
		list := g.keys[k]
		for taken[k] < len(list) {
			q := list[taken[k]]
			if _, held := st.Holders[q.w.RunID]; held {
				taken[k]++ // admitted (or being admitted) already: repaired, not admitted again
				continue
			}
			return q
		}
		return nil
	}
	cursor := g.cursor
	for len(picks) < batch {
		var best *queued
		var bestAt time.Time
		bestIdx := -1
		for i := range g.ring {
			idx := (cursor + i) % len(g.ring)
			k := g.ring[idx]
			q := head(k)
			for q != nil {
				at := maxTime(now, st.Last(), q.w.StartedAt, q.notBefore)
				blk, ok := st.Check(q.w.RunID, q.w.Control, at)
				if ok {
					break
				}
				if !blk.Concurrency() {
					if due.IsZero() || blk.Until.Before(due) {
						due = blk.Until
					}
					q = nil
					break
				}
				if replacing(st, q.w.RunID) {
					// A reset's new run, whose old run holds the slot the reset is ending: it
					// waits for that slot rather than meet the policy of a full limit.
					q = nil
					break
				}
				switch q.w.Control.Policy() {
				case event.OnLimitCancelNewest:
					cancels = append(cancels, cancellation{runID: q.w.RunID, queued: q,
						reason: fmt.Sprintf("cancelled by flow control: %s (%s); policy cancel_newest", blk, q.w.Control.Describe())})
					taken[k]++
					q = head(k)
					continue
				case event.OnLimitCancelOldest:
					if victim := oldestHolder(st, g, evict, q.w.Control.Key, blk.Keyed()); victim != "" {
						evict[victim] = true
						cancels = append(cancels, cancellation{runID: victim,
							reason: fmt.Sprintf("cancelled by flow control: replaced by the newer run %q, as %s (%s); policy cancel_oldest", q.w.RunID, blk, q.w.Control.Describe())})
					}
				}
				q = nil
			}
			if q == nil {
				continue
			}
			if best == nil || q.w.Priority > best.w.Priority {
				best, bestAt, bestIdx = q, maxTime(now, st.Last(), q.w.StartedAt, q.notBefore), idx
			}
		}
		if best == nil {
			break
		}
		if err := st.Take(best.w.RunID, best.w.Control, bestAt); err != nil {
			a.c.logger.Error("taking a flow-control slot failed", slog.String("run_id", best.w.RunID), slog.String("error", err.Error()))
			break
		}
		picks = append(picks, pick{q: best, at: bestAt})
		taken[best.w.Control.Key]++
		cursor = bestIdx + 1
	}
	if len(g.ring) > 0 {
		g.cursor = cursor % len(g.ring)
	}
	return picks, cancels, due
}

// replacing reports whether queued run id is the new run of a reset of a run of its workflow
// that holds a slot of st: resets of a workflow are serialized and never leave two live runs,
// so that holder is the run the reset ends (or ended, its end not seen yet).
func replacing(st *limits.State, id string) bool {
	family, ok := engine.ResetFamily(id)
	if !ok {
		return false
	}
	for run := range st.Holders {
		if f, _ := engine.ResetFamily(run); run == family || f == family {
			return true
		}
	}
	return false
}

// oldestHolder returns the holder admitted first among those of key (keyed) or of the whole
// group, unless one of them is being cancelled already; "" when there is none to cancel.
func oldestHolder(st *limits.State, g *admitGroup, evict map[string]bool, key string, keyed bool) string {
	var oldest string
	var at time.Time
	for run, h := range st.Holders {
		if keyed && h.Key != key {
			continue
		}
		if g.evicting[run] || evict[run] {
			return ""
		}
		if oldest == "" || h.At.Before(at) || h.At.Equal(at) && run < oldest {
			oldest, at = run, h.At
		}
	}
	return oldest
}

func maxTime(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m.UTC()
}

// admit appends run.admitted for each pick, at the time its token was taken, a few at a time.
func (a *admitter) admit(ctx context.Context, g *admitGroup, picks []pick) {
	type outcome struct {
		p   pick
		err error
	}
	out := make([]outcome, len(picks))
	sem := make(chan struct{}, admitConcurrency)
	var wg sync.WaitGroup
	for i, p := range picks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i] = outcome{p: p, err: a.c.engine.Admit(ctx, p.q.w.RunID, p.at)}
		})
	}
	wg.Wait()
	for _, o := range out {
		run := o.p.q.w.RunID
		var late *engine.LateAdmissionError
		switch {
		case o.err == nil:
			g.verified[run] = true
			a.c.admitted.Add(1)
		case errors.As(o.err, &late):
			// Admitted again later, at a time no earlier than the run's latest event.
			if err := a.limits.Update(ctx, g.name, func(st *limits.State) bool { return st.Unreserve(run) }); err != nil {
				a.c.logger.Warn("giving back a reservation failed; the next round repairs it", slog.String("run_id", run), slog.String("error", err.Error()))
				continue
			}
			q := &queued{w: o.p.q.w, notBefore: late.Latest}
			a.byRun[run] = q
			g.add(q)
		case errors.Is(o.err, core.ErrAdmitted):
			// Another leader admitted it a moment ago (two overlapped): its slot and token stand.
			g.verified[run] = true
		case errors.Is(o.err, core.ErrStale), errors.Is(o.err, core.ErrTerminal):
			// Ended or being cancelled before any admission: no run.admitted holds its token, so
			// the slot and the token go back.
			if err := a.limits.Update(ctx, g.name, func(st *limits.State) bool { return st.Unreserve(run) }); err != nil {
				a.c.logger.Warn("giving back a reservation failed; the next round repairs it", slog.String("run_id", run), slog.String("error", err.Error()))
			}
		default:
			if ctx.Err() == nil {
				a.c.logger.Warn("appending run.admitted failed; the next round completes it", slog.String("run_id", run), slog.String("error", o.err.Error()))
			}
		}
	}
}

// repair settles a slot held by run runID that this leader does not know to be admitted: it
// reports whether it changed the group's state.
func (a *admitter) repair(ctx context.Context, g *admitGroup, runID string, h limits.Holder) (bool, error) {
	s, err := a.c.engine.Snapshot(ctx, runID)
	if errors.Is(err, core.ErrNotFound) || errors.Is(err, store.ErrDeleted) {
		// A slot of a run that does not exist (or no longer): nothing will ever release it.
		a.repaired(ctx, g, runID, "the run does not exist; its slot was given back")
		return true, a.limits.Update(ctx, g.name, func(st *limits.State) bool { return st.Unreserve(runID) })
	}
	if errors.Is(err, store.ErrDamaged) {
		// A quarantined run keeps its slot: once an operator accepts the damage it goes on, or
		// ends, as the key's holder; released now, another run of the key would be admitted
		// beside it. Its slot goes when the runs index shows it ended (flow terminate).
		if !g.damaged[runID] {
			a.c.logger.Error("a flow-control slot is held by a run whose history is damaged; it stays held until the run is released (flow resume --accept-damage) or terminated",
				slog.String("run_id", runID), slog.String("group", g.name), slog.String("error", err.Error()))
		}
		g.verified[runID], g.damaged[runID] = true, true
		return false, nil
	}
	if err != nil {
		return false, err
	}
	delete(g.damaged, runID)
	switch {
	case s.Terminal():
		// Ended while no controller looked (or its end was missed): released here.
		a.repaired(ctx, g, runID, "the run ended; its slot was released")
		return true, a.limits.Release(ctx, g.name, runID)
	case s.Admitted:
		g.verified[runID] = true
		return false, nil
	}
	err = a.c.engine.Admit(ctx, runID, h.At)
	var late *engine.LateAdmissionError
	switch {
	case errors.Is(err, core.ErrAdmitted):
		g.verified[runID] = true
		return false, nil
	case err == nil:
		g.verified[runID] = true
		a.c.admitted.Add(1)
		a.repaired(ctx, g, runID, "a reservation whose run.admitted was never appended was completed")
		if q, ok := a.byRun[runID]; ok {
			a.forget(g, q)
		}
		return false, nil
	case errors.As(err, &late), errors.Is(err, core.ErrStale), errors.Is(err, core.ErrTerminal):
		// The reservation cannot be completed at its time: give it back; a run still waiting is
		// admitted again from the queue.
		if q, ok := a.byRun[runID]; ok && late != nil {
			q.notBefore = late.Latest
		}
		a.repaired(ctx, g, runID, "a reservation that could not be completed was given back")
		return true, a.limits.Update(ctx, g.name, func(st *limits.State) bool { return st.Unreserve(runID) })
	}
	return false, err
}

// cancel carries out a cancellation a full limit's policy asks for.
func (a *admitter) cancel(ctx context.Context, g *admitGroup, c cancellation) {
	err := a.c.engine.CancelByControl(ctx, c.runID, c.reason)
	switch {
	case err == nil, errors.Is(err, core.ErrTerminal):
		if c.queued != nil {
			a.forget(g, c.queued)
		} else {
			g.evicting[c.runID] = true // until its slot is released
		}
		a.c.cancelledByControl.Add(1)
	default:
		if ctx.Err() == nil {
			a.c.logger.Warn("cancelling a run by flow control failed; retrying", slog.String("run_id", c.runID), slog.String("error", err.Error()))
		}
		g.due = time.Now().Add(200 * time.Millisecond)
	}
}

// admissionLease is the admission controller's key in FLOW_LEASES. It is a lease of its own, not
// the timers' one, so that the two may lead in different replicas. A leader that overlaps a new
// one for a moment cannot admit past the limits, since every admission is a compare-and-set of
// the group's state.
const admissionLease = "admission"

// Admitting reports whether this replica holds the admission lease and admits runs.
func (s *Scheduler) Admitting() bool { return s.admissionLease.Leading() }

// Admitted returns the number of runs this replica admitted.
func (s *Scheduler) Admitted() int64 { return s.admission.Admitted() }

// Admitted returns the number of runs the controller admitted.
func (c *admissionController) Admitted() int64 { return c.admitted.Load() }
