package scheduler

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/wait"
)

// The heartbeat watcher (docs/timeouts.md) runs while this replica holds the scheduler's lease.
// It watches FLOW_HEARTBEATS, where workers record each step attempt's start and heartbeats,
// keeps every entry's next deadline in memory (the heartbeat timeout from the entry's latest
// write, by the server's clock; the start-to-close timeout from the attempt's start), and when
// one passes appends the attempt's step.failed naming the timeout, at the expected sequence and
// only while that attempt is in flight (engine.TimeoutStep). It then marks the entry settled.
//
// Nothing it keeps is durable: a watcher that starts (a restart, a new leader) reads every entry
// again and recomputes the deadlines from them. Its write pair is the append, then the mark: a
// watcher that dies between them leaves an unsettled entry, whose deadline has passed, so the
// next watcher tries again, finds the attempt no longer in flight, and only marks it.

// beatConcurrency caps the timeouts being appended at once.
const beatConcurrency = 16

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

// beatDone reports a timeout attempt: retry is set when it failed and should be tried again.
type beatDone struct {
	w     *watched
	retry bool
}

// watchHeartbeats runs the watcher until ctx ends, starting it again after a failed watch.
func (s *Scheduler) watchHeartbeats(ctx context.Context) {
	for ctx.Err() == nil {
		err := s.watchHeartbeatsOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		s.logger.Warn("the heartbeat watch ended; watching again", slog.String("error", err.Error()))
		wait.For(ctx, restartBackoff)
	}
}

var errBeatWatchEnded = errors.New("the heartbeat watch ended")

func (s *Scheduler) watchHeartbeatsOnce(ctx context.Context) error {
	kw, err := s.heartbeats.WatchAll(ctx)
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
			remove(e.Key())
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var entry engine.HeartbeatEntry
			if err := json.Unmarshal(e.Value(), &entry); err != nil {
				s.logger.Warn("a FLOW_HEARTBEATS entry does not decode; ignored", slog.String("key", e.Key()), slog.String("error", err.Error()))
				continue
			}
			at, kind, ok := entry.Deadline(e.Created())
			if !ok {
				continue
			}
			w := &watched{key: e.Key(), entry: entry, rev: e.Revision(), at: at, kind: kind}
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
					retry := s.timeoutAttempt(ctx, w) != nil
					select {
					case done <- beatDone{w: w, retry: retry}:
					case <-ctx.Done():
					}
				}()
			}
		case d := <-done:
			delete(firing, d.w.key)
			if _, newer := byKey[d.w.key]; d.retry && !newer {
				d.w.at = time.Now().Add(time.Second)
				byKey[d.w.key] = d.w
				heap.Push(&h, d.w)
			}
		}
	}
}

// timeoutAttempt appends the timeout of w's attempt, if it is still in flight, and marks its
// entry settled.
func (s *Scheduler) timeoutAttempt(ctx context.Context, w *watched) error {
	e := w.entry
	appended, err := s.engine.TimeoutStep(ctx, e.RunID, e.StepID, e.Attempt, w.kind)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, core.ErrInvalidInput) {
			s.logger.Warn("appending a step timeout failed; trying again", slog.String("run_id", e.RunID),
				slog.String("step_id", e.StepID), slog.Int("attempt", e.Attempt), slog.String("error", err.Error()))
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		// The run recorded no such timeout for the step: the entry's is not the history's.
	}
	if appended {
		s.timedOut.Add(1)
		s.logger.Info("step attempt timed out", slog.String("run_id", e.RunID), slog.String("step_id", e.StepID),
			slog.Int("attempt", e.Attempt), slog.String("timeout", w.kind))
	}
	if err := s.cfg.Faults.Hit(fault.AfterTimeoutBeforeSettle); err != nil {
		return err
	}
	e.Settled = true
	val, err := json.Marshal(&e)
	if err != nil {
		return err
	}
	// A write since (a heartbeat, the next attempt's start) makes this one fail: that entry
	// is watched in its own right.
	_, _ = s.heartbeats.Update(ctx, w.key, val, w.rev)
	return nil
}

// attemptStarted reports whether a worker recorded the start of timer t's attempt (a
// schedule-to-start timer) in FLOW_HEARTBEATS: the timer is then moot.
func (s *Scheduler) attemptStarted(ctx context.Context, t core.Timer) (bool, error) {
	kve, err := s.heartbeats.Get(ctx, engine.HeartbeatKey(t.RunID, t.ID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var entry engine.HeartbeatEntry
	if err := json.Unmarshal(kve.Value(), &entry); err != nil {
		return false, nil // an entry that does not decode records no start
	}
	return entry.Attempt >= t.Attempt, nil
}

// TimedOut returns the number of step attempts this replica's heartbeat watcher timed out.
func (s *Scheduler) TimedOut() int64 { return s.timedOut.Load() }
