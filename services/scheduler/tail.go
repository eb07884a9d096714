package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/streams"
	"github.com/flowrun/flow/pkg/event"
)

// errNoRun reports a run whose history holds no commit (yet, on the replica that answered).
var errNoRun = errors.New("no commit of the run")

// readTail reads the first and the last commit of run runID with one direct get each: what
// firing a timer of the run needs (engine.RunTail), without reading the history in between,
// which the server would scan through every message of every run committed meanwhile. Any
// replica answers; one that lags may return an earlier last commit, which makes the firing
// read the run from the stream's leader. The store observes the last commit, so that the
// firing appended after it publishes at once.
func (s *Scheduler) readTail(ctx context.Context, runID string) (engine.RunTail, error) {
	subject := streams.HistorySubject(runID)
	first, err := s.history.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
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
	tail := engine.RunTail{Queue: rs.Queue, Build: rs.Spec.BuildID, TraceParent: rs.TraceParent, Last: started[len(started)-1]}
	last, err := s.history.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return engine.RunTail{}, err
	}
	if last.Sequence != first.Sequence {
		events, err := commitEvents(runID, last)
		if err != nil {
			return engine.RunTail{}, err
		}
		tail.Last = events[len(events)-1]
	}
	// The append of a firing right after this commit needs no read of its position.
	s.store.ObservePosition(runID, tail.Last.Seq, last.Sequence)
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
func hintOf(m *nats.Msg) (core.Timer, bool) {
	types := m.Header.Get(jsstore.HeaderTypes)
	switch types[strings.LastIndexByte(types, ',')+1:] {
	case string(event.TypeWaitScheduled), string(event.TypeStepRetryScheduled), string(event.TypeRunStarted), string(event.TypeRunDebounced):
	default:
		return core.Timer{}, false
	}
	runID := strings.TrimPrefix(m.Subject, streams.HistorySubject(""))
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
func (s *Scheduler) confirm(ctx context.Context, t core.Timer) (*engine.RunTail, error) {
	deadline := time.Now().Add(confirmFor)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		tail, err := s.readTail(ctx, t.RunID)
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
