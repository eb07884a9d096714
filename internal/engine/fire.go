package engine

import (
	"context"
	"errors"
	"strconv"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// Preload reads the snapshot of timer t's run into the engine's cache, up to at least the event
// that scheduled t, so that Fire soon after appends without reading first: a scheduler calls
// it for timers about to fall due. It reads nothing when the cached snapshot already reaches
// that event, and does nothing while another caller holds the run (that caller reads it). An
// error means only that the snapshot is not cached: Fire reads the run itself.
func (e *Engine) Preload(ctx context.Context, t core.Timer) error {
	atLeast := max(t.Seq, 1)
	rl, locked := e.locks.tryLock(t.RunID)
	if !locked {
		return nil
	}
	defer e.locks.unlock(t.RunID, rl)
	if s, _ := e.cache.get(t.RunID); s != nil {
		if s.Seq >= atLeast || s.Terminal() {
			return nil
		}
		return e.readTail(ctx, s, atLeast)
	}
	s, err := e.snapshot(ctx, t.RunID, atLeast)
	if err != nil {
		return err
	}
	e.cache.put(t.RunID, s, false)
	return nil
}

// RunTail is what firing a timer needs to know of its run when the run is not cached: where its
// resume task goes, from run.started, and its last committed event, as read. A store can read
// both without reading the history between them (on JetStream, two direct gets, where a read of
// the history scans every message of other runs in between).
type RunTail struct {
	// Queue, Build and TraceParent are run.started's: the run's task queue, the build it is
	// pinned to, its trace context.
	Queue, Build, TraceParent string
	// Last is the run's last committed event as read; a lagging replica may answer with an
	// earlier one.
	Last event.Envelope
	// Commit, when set, is the commit that ends with Last, and Position where it sits in the
	// store: a resume task carries them (Task.Head).
	Commit   []event.Envelope
	Position uint64
}

// FireOnTail fires timer t as Fire does, but reads nothing when tail shows that the run's last
// event is the one that scheduled t (t.Seq): no later event can have fired t or ended the run,
// so the firing is appended right after it, at the expected sequence. When the run moved on
// (tail ends elsewhere, or the append conflicts) or the engine caches the run, it is Fire.
func (e *Engine) FireOnTail(ctx context.Context, t core.Timer, tail RunTail) error {
	p, ok := firingOf(t, tail.Last)
	if !ok {
		return e.Fire(ctx, t)
	}
	head, err := e.fireOnTail(ctx, t, tail.Last, p)
	if errors.Is(err, errCached) || errors.Is(err, store.ErrConflict) {
		return e.Fire(ctx, t)
	}
	if err != nil {
		return err
	}
	e.locks.poke(t.RunID)
	e.resume(ctx, Task{RunID: t.RunID, Queue: tail.Queue, Build: tail.Build, Seq: t.Seq + 1, TraceParent: tail.TraceParent, Head: head})
	return nil
}

// HandOff sends the run of t, one of the run's own timers (core.OwnTimers) that fell due, a
// resume task, so that a worker fires t itself in one commit with the decision that follows
// (due.go). tail names the run's queue and build; the task's nonce names the timer, so that
// handing the same timer off again (a new scheduler leader) sends no second task.
//
// The task carries the run's last commit as tail read it, where tail holds it: a worker whose
// cached snapshot ends with that commit reads nothing before it fires t (a commit made since
// makes its append conflict, and is read then).
func (e *Engine) HandOff(ctx context.Context, t core.Timer, tail RunTail) error {
	task := Task{RunID: t.RunID, Queue: tail.Queue, Build: tail.Build, Seq: max(t.Seq, tail.Last.Seq),
		Nonce: dueNonce + t.Key(), TraceParent: tail.TraceParent}
	if n := len(tail.Commit); n > 0 && tail.Commit[n-1].Seq == task.Seq && tail.Position > 0 {
		if b, err := event.MarshalEnvelopes(tail.Commit); err == nil && len(b) <= maxHead {
			task.Head = &Head{Events: b, Position: tail.Position}
		}
	}
	return e.host.Resume(ctx, task)
}

// errCached sends a firing to the cached snapshot.
var errCached = errors.New("the run is cached or held")

// fireOnTail appends p, the firing of t, right after last, unless the engine holds or caches
// the run (errCached), and returns the commit for the run's resume task to carry.
func (e *Engine) fireOnTail(ctx context.Context, t core.Timer, last event.Envelope, p event.Payload) (*Head, error) {
	rl, locked := e.locks.tryLock(t.RunID)
	if !locked {
		return nil, errCached
	}
	defer e.locks.unlock(t.RunID, rl)
	if s, _ := e.cache.get(t.RunID); s != nil {
		return nil, errCached
	}
	if err := e.faults.Hit(fault.StoreAppend); err != nil {
		return nil, err
	}
	at := e.clock.Now().UTC()
	if at.Before(last.Time) {
		at = last.Time // recorded times never go backwards
	}
	_, err := e.store.Append(ctx, t.RunID, t.Seq, event.Event{Time: at, Payload: p})
	countAppend(ctx, err)
	if err != nil {
		return nil, err
	}
	return e.commitHead(t.RunID, []event.Envelope{{RunID: t.RunID, Seq: t.Seq + 1, Time: at, Payload: p}}), nil
}

// firingOf returns the event that fires t, if last is the event that scheduled t: then t is
// pending for as long as last is the run's last event.
func firingOf(t core.Timer, last event.Envelope) (event.Payload, bool) {
	if t.Seq == 0 || last.Seq != t.Seq || last.RunID != t.RunID {
		return nil, false
	}
	switch d := last.Payload.(type) {
	case *event.WaitScheduled:
		if t.Kind == core.TimerWait && d.WaitID == t.ID && d.Deadline.Equal(t.Due) {
			return &event.WaitFired{WaitID: t.ID}, true
		}
	case *event.StepRetryScheduled:
		if t.Kind == core.TimerRetry && d.StepID == t.ID && d.Attempt == t.Attempt && d.Due.Equal(t.Due) {
			return &event.StepRetryFired{StepID: t.ID, Attempt: t.Attempt}, true
		}
	case *event.RunStarted:
		if t.Kind == core.TimerStart && t.ID == "1" && !d.NotBefore.IsZero() && d.NotBefore.Equal(t.Due) {
			return &event.RunDelayFired{NotBefore: d.NotBefore}, true
		}
	case *event.RunDebounced:
		if t.Kind == core.TimerStart && t.ID == strconv.FormatUint(last.Seq, 10) && d.NotBefore.Equal(t.Due) {
			return &event.RunDelayFired{NotBefore: d.NotBefore}, true
		}
	}
	return nil, false
}

// Fires reports whether FireOnTail can fire t on tail without reading the run: tail's last
// event is the one that scheduled t.
func (tail RunTail) Fires(t core.Timer) bool {
	_, ok := firingOf(t, tail.Last)
	return ok
}
