package engine

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/lru"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/pkg/event"
)

// A driver fires its run's own timers (core.OwnTimers: waits and step retry backoffs) once they
// are due by the engine's clock, in one commit with the decision they allow: a sleep's end and
// the next step cost one append, not a firing by the scheduler, a resume task and a decision.
// It fires them at the top of its loop, while its steps run (a local timer wakes it), and, at
// the end of a drive, waits in place for one falling due within Config.HoldTimers (holding the
// run and its task, but not its worker's run slot: Task.Release).
//
// Ownership: the scheduler hands every such timer to the run's workers when it falls due, with
// a resume task (Engine.HandOff), and fires it itself only if it is still pending after its
// grace period with no task of the run left (scheduler Config.HandOffGrace). A hand-off that
// finds the timer fired, or a driver of the run active in this engine, needs no drive of its
// own: whoever fired it, or the active driver, drives the run on under a task of its own. All
// write the firing at the run's expected sequence, and only while the timer is pending in the
// run's history, so whichever appends first fires it and the others find it moot: a timer fires
// once and never before it is due, and a worker that dies holding a run leaves it to the
// hand-off.

// dueCache is the earliest due time of the snapshot's own timers, as found at its timer
// sequence and pending counts.
type dueCache struct {
	known   bool
	seq     uint64
	pending int
	next    time.Time
}

// nextDue returns the earliest due time of the run's own pending timers, zero for none. It
// looks through the snapshot only when a timer was scheduled, fired or cancelled since it last
// did.
func (d *driver) nextDue() time.Time {
	s := d.s
	pending := s.Progress.WaitsPending + s.Progress.StepsRetrying
	if c := d.due; c.known && c.seq == s.TimerSeq && c.pending == pending {
		return c.next
	}
	d.due = dueCache{known: true, seq: s.TimerSeq, pending: pending}
	for _, t := range core.OwnTimers(s) {
		if d.due.next.IsZero() || t.Due.Before(d.due.next) {
			d.due.next = t.Due
		}
	}
	return d.due.next
}

// fireDue records the firing of every own timer of the run that is due, with the decision the
// code makes on it, as one commit (commitInputs), and reports whether it fired any. On an
// error wrapping store.ErrConflict the snapshot has been read again from the store.
func (d *driver) fireDue(ctx context.Context) (bool, error) {
	next := d.nextDue()
	now := d.e.clock.Now()
	if next.IsZero() || next.After(now) {
		return false, nil
	}
	if d.pending() && d.full(0, 1, 0) {
		if _, err := d.settled(ctx); err != nil {
			return false, err
		}
		return true, nil // the loop looks again at the snapshot as it is now
	}
	var firings []event.Payload
	var fired []core.Timer
	for _, t := range core.OwnTimers(d.s) {
		if t.Due.After(now) {
			continue
		}
		if evs, err := core.Fire(d.s, t); err == nil {
			firings = append(firings, evs...)
			fired = append(fired, t)
		}
	}
	d.due.known = false
	if len(firings) == 0 {
		return false, nil
	}
	expected := d.s.Seq
	t := d.e.now(d.s)
	for _, ft := range fired {
		metrics.TimerLateness(ctx, string(ft.Kind), t.Sub(ft.Due).Seconds())
	}
	if err := d.e.applyCommitted(d.s, expected+1, t, firings); err != nil {
		return false, err
	}
	return true, d.commitInputs(ctx, expected, t, nil, nil, firings)
}

// dueIn returns how long until the earliest own timer of the run falls due, and whether there
// is one.
func (d *driver) dueIn() (time.Duration, bool) {
	next := d.nextDue()
	if next.IsZero() {
		return 0, false
	}
	return max(next.Sub(d.e.clock.Now()), 0), true
}

// holdDue reports whether the drive, about to end, waits in place for an own timer that falls
// due within the engine's hold: once per due time, so that a clock that does not move (a test's)
// cannot keep the drive, and while fewer than HoldMax drives do. When it reports true it counts
// the drive in Engine.holding, which the caller decrements once the wait is over.
func (d *driver) holdDue() bool {
	in, ok := d.dueIn()
	if !ok || in > d.e.holdTimers || d.nextDue().Equal(d.heldFor) {
		return false
	}
	if d.e.holding.Add(1) > d.e.holdMax {
		d.e.holding.Add(-1)
		return false
	}
	d.heldFor = d.nextDue()
	return true
}

// handedOff returns the key of the timer task t hands off (Engine.HandOff), if it does.
func handedOff(t Task) (string, bool) {
	if key, ok := strings.CutPrefix(t.Nonce, dueNonce); ok && key != "" {
		return key, true
	}
	return "", false
}

// dueNonce prefixes the nonce of a task that hands off a timer: "due.<timer key>".
const dueNonce = "due."

// ownPending reports whether the run's own timer of key (core.Timer.Key) is pending in s.
func ownPending(s *core.Snapshot, key string) bool {
	for _, t := range core.OwnTimers(s) {
		if t.Key() == key {
			return true
		}
	}
	return false
}

// endedRuns is a bounded set of the runs an engine saw end, with their drives' results. An
// ended run never changes again, so what it holds never goes stale.
type endedRuns struct {
	mu  sync.Mutex
	lru *lru.Cache[string, Result]
}

// endedRunsMax bounds endedRuns.
const endedRunsMax = 10_000

func newEndedRuns(max int) *endedRuns { return &endedRuns{lru: lru.New[string, Result](max)} }

func (r *endedRuns) put(runID string, res Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lru.Put(runID, res)
}

func (r *endedRuns) get(runID string) (Result, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lru.Get(runID)
}

// dueTimerC returns a channel that receives when the run's earliest own timer falls due, nil
// when there is none; stop releases it.
func (d *driver) dueTimerC() (c <-chan time.Time, stop func()) {
	in, ok := d.dueIn()
	if !ok {
		return nil, func() {}
	}
	if d.dueTimer == nil {
		d.dueTimer = time.NewTimer(in)
	} else {
		d.dueTimer.Reset(in)
	}
	return d.dueTimer.C, func() { d.dueTimer.Stop() }
}
