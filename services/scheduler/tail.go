package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

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
	return tail, s.store.Observe(runID, last)
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
