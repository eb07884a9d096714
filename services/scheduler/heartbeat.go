package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/heartbeats"
	"github.com/flowrun/flow/internal/wait"
)

// heartbeatWatcher times out step attempts (docs/timeouts.md). It runs while its replica holds
// the scheduler's lease, beside the timer firer.
//
// Reads: FLOW_HEARTBEATS (internal/heartbeats), whose one writer is the workers, and the runs'
// histories. Writes: the step.failed of each attempt whose heartbeat or start-to-close
// deadline passed, through the engine, at the expected sequence.
//
// It watches FLOW_HEARTBEATS, where workers record each step attempt's start and heartbeats,
// keeps every entry's next deadline in memory (the heartbeat timeout from the entry's latest
// write, by the server's clock; the start-to-close timeout from the attempt's start), and when
// one passes appends the attempt's step.failed naming the timeout, at the expected sequence and
// only while that attempt is in flight (engine.TimeoutStep).
//
// The watcher never writes FLOW_HEARTBEATS: the workers are its one writer. Whether an entry's
// attempt is still in flight is history's answer, not the entry's. Nothing the watcher keeps is
// durable: a watcher that starts (a restart, a new leader) reads every entry again, recomputes
// the deadlines, and checks each passed one against history once (a timeout appended before
// finds the attempt settled, and appends nothing). An entry checked is forgotten until its next
// write; checked records which revisions were, so that a watch that starts again in this
// process does not check them again. Entries leave the bucket with its TTL.
type heartbeatWatcher struct {
	logger *slog.Logger
	// Set by wire, before Run.
	beats  *heartbeats.Store
	engine *engine.Engine
	// watch opens the watch on FLOW_HEARTBEATS; nil means beats.Watch. Tests replace it.
	watch func(context.Context) (*heartbeats.Watcher, error)

	// timedOut counts the attempts it timed out, beatChecks the passed deadlines it checked
	// against history; checked is its record of the entries it checked, kept across its
	// watches (and leaderships) in this process.
	timedOut   atomic.Int64
	beatChecks atomic.Int64
	checked    checkedBeats
}

// wire hands the watcher its repository and engine, before Run.
func (hw *heartbeatWatcher) wire(beats *heartbeats.Store, e *engine.Engine) {
	hw.beats, hw.engine = beats, e
}

// beatConcurrency caps the timeouts being appended at once.
const beatConcurrency = 16

// checkedCap bounds the record of checked entries: past it, the oldest are forgotten, and a
// watch that starts again checks those once more (history guards the append).
const checkedCap = 1 << 14

// checkedBeats records the FLOW_HEARTBEATS entries, by key and revision, whose deadline the
// watcher checked against history: the attempt timed out, or was found no longer in flight. It
// holds at most checkedCap entries, evicting the oldest. Only the watcher's loop uses it (one
// watcher runs at a time), so it takes no lock.
type checkedBeats struct {
	rev   map[string]uint64
	order []checkedBeat // in the order recorded; an element whose rev is stale is skipped
}

type checkedBeat struct {
	key string
	rev uint64
}

// add records that key's entry at rev was checked.
func (c *checkedBeats) add(key string, rev uint64) {
	if c.rev == nil {
		c.rev = map[string]uint64{}
	}
	c.rev[key] = rev
	c.order = append(c.order, checkedBeat{key, rev})
	for len(c.order) > checkedCap {
		old := c.order[0]
		c.order = c.order[1:]
		if c.rev[old.key] == old.rev {
			delete(c.rev, old.key)
		}
	}
}

// seen reports whether key's entry at rev was checked. A key recorded at another revision is
// forgotten: its entry was written since.
func (c *checkedBeats) seen(key string, rev uint64) bool {
	r, ok := c.rev[key]
	if ok && r != rev {
		delete(c.rev, key)
	}
	return ok && r == rev
}

// forget drops key's record: its entry was deleted.
func (c *checkedBeats) forget(key string) { delete(c.rev, key) }

// watched is an entry with a deadline.
type watched struct {
	key   string
	entry engine.HeartbeatEntry
	rev   uint64
	at    time.Time
	kind  string
	idx   int
}

type beatHeap []*watched

func (h beatHeap) Len() int { return len(h) }
func (h beatHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].key < h[j].key
}
func (h beatHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].idx, h[j].idx = i, j }
func (h *beatHeap) Push(x any)   { w := x.(*watched); w.idx = len(*h); *h = append(*h, w) }
func (h *beatHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	w.idx = -1
	return w
}

// beatDone reports a deadline's check: retry is set when it failed and should be tried again.
type beatDone struct {
	w     *watched
	retry bool
}

// Run runs the watcher until ctx ends, starting it again after a failed watch; it returns nil.
func (hw *heartbeatWatcher) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := hw.watchOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		hw.logger.Warn("the heartbeat watch ended; watching again", slog.String("error", err.Error()))
		wait.For(ctx, restartBackoff)
	}
	return nil
}

var errBeatWatchEnded = errors.New("the heartbeat watch ended")

func (hw *heartbeatWatcher) watchOnce(ctx context.Context) error {
	watch := hw.watch
	if watch == nil {
		watch = hw.beats.Watch
	}
	kw, err := watch(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = kw.Stop() }()
	byKey := map[string]*watched{}
	firing := map[string]bool{}
	var h beatHeap
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	done := make(chan beatDone, beatConcurrency)
	sem := make(chan struct{}, beatConcurrency)
	remove := func(key string) {
		if w, ok := byKey[key]; ok {
			if w.idx >= 0 {
				heap.Remove(&h, w.idx)
			}
			delete(byKey, key)
		}
	}
	for {
		if h.Len() > 0 {
			timer.Reset(time.Until(h[0].at))
		}
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-kw.Updates():
			if !ok {
				return errBeatWatchEnded
			}
			if e == nil {
				continue // the initial values are in
			}
			remove(e.Key)
			if e.Deleted {
				hw.checked.forget(e.Key)
				continue
			}
			if hw.checked.seen(e.Key, e.Revision) {
				continue // its deadline passed and was checked: nothing is left to watch
			}
			if e.Err != nil {
				hw.logger.Warn("a FLOW_HEARTBEATS entry does not decode; ignored", slog.String("key", e.Key), slog.String("error", e.Err.Error()))
				continue
			}
			entry := e.Value
			at, kind, ok := entry.Deadline(e.Created)
			if !ok {
				continue
			}
			w := &watched{key: e.Key, entry: entry, rev: e.Revision, at: at, kind: kind}
			byKey[w.key] = w
			heap.Push(&h, w)
		case <-timer.C:
			now := time.Now()
			for h.Len() > 0 && !h[0].at.After(now) {
				w := heap.Pop(&h).(*watched)
				delete(byKey, w.key)
				if firing[w.key] {
					continue
				}
				firing[w.key] = true
				go func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					retry := hw.timeoutAttempt(ctx, w) != nil
					select {
					case done <- beatDone{w: w, retry: retry}:
					case <-ctx.Done():
					}
				}()
			}
		case d := <-done:
			delete(firing, d.w.key)
			if !d.retry {
				hw.checked.add(d.w.key, d.w.rev)
				hw.beatChecks.Add(1)
				continue
			}
			if _, newer := byKey[d.w.key]; !newer {
				d.w.at = time.Now().Add(time.Second)
				byKey[d.w.key] = d.w
				heap.Push(&h, d.w)
			}
		}
	}
}

// timeoutAttempt appends the timeout of w's attempt if it is still in flight. It returns an
// error when that could not be told, and the check is to be tried again.
func (hw *heartbeatWatcher) timeoutAttempt(ctx context.Context, w *watched) error {
	e := w.entry
	appended, err := hw.engine.TimeoutStep(ctx, e.RunID, e.StepID, e.Attempt, w.kind)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		if !errors.Is(err, core.ErrInvalidInput) {
			hw.logger.Warn("appending a step timeout failed; trying again", slog.String("run_id", e.RunID),
				slog.String("step_id", e.StepID), slog.Int("attempt", e.Attempt), slog.String("error", err.Error()))
			return err
		}
		// The run recorded no such timeout for the step: the entry's is not the history's.
	}
	if appended {
		hw.timedOut.Add(1)
		hw.logger.Info("step attempt timed out", slog.String("run_id", e.RunID), slog.String("step_id", e.StepID),
			slog.Int("attempt", e.Attempt), slog.String("timeout", w.kind))
	}
	return nil
}

// TimedOut returns the number of step attempts this replica's heartbeat watcher timed out.
func (s *Scheduler) TimedOut() int64 { return s.beats.TimedOut() }

// TimedOut returns the number of step attempts the watcher timed out.
func (hw *heartbeatWatcher) TimedOut() int64 { return hw.timedOut.Load() }

// BeatChecks returns the number of entries' passed deadlines this replica's heartbeat watcher
// checked against history (the attempt timed out, or found no longer in flight), each counted
// once recorded as checked.
func (s *Scheduler) BeatChecks() int64 { return s.beats.Checks() }

// Checks returns the number of passed deadlines the watcher checked against history.
func (hw *heartbeatWatcher) Checks() int64 { return hw.beatChecks.Load() }
