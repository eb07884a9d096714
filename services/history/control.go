package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/internal/streams"
	"github.com/flowrun/flow/pkg/event"
)

// control keeps the flow-control consequences of commits, as the history service follows them:
// the FLOW_QUEUE entry of a run waiting for admission (written when a run under flow control
// starts, deleted once it is admitted or ended) and the release of an ended run's slot in
// FLOW_LIMITS. Both are functions of the run's latest snapshot, idempotent, and repeated when a
// commit is applied again; the admission controller repairs a slot whose run ended or was never
// admitted in the meantime.
type control struct {
	queue  jetstream.KeyValue
	limits *limits.Store
	faults *fault.Injector
	// releases batches the lanes' releases of one group into one compare-and-set.
	mu       sync.Mutex
	releases map[string]*releaseBatch
}

// releaseBatch is the runs whose slots one write releases; done closes once it is written, with
// err set if it failed.
type releaseBatch struct {
	runs []string
	done chan struct{}
	err  error
}

func openControl(ctx context.Context, js jetstream.JetStream, faults *fault.Injector) (*control, error) {
	queue, err := js.KeyValue(ctx, streams.QueueBucket)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", streams.QueueBucket, err)
	}
	st, err := limits.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	return &control{queue: queue, limits: st, faults: faults, releases: map[string]*releaseBatch{}}, nil
}

// apply carries out the flow-control consequences of commit, one append to run s.RunID, given s,
// the run's snapshot at or after the commit.
func (c *control) apply(ctx context.Context, s *core.Snapshot, commit []event.Envelope) error {
	if s.Control == nil {
		return nil
	}
	// started is set by the commit that makes the run wait for admission: its run.started, or,
	// for a delayed start, its run.delay_fired.
	var started, admitted, ended bool
	for _, e := range commit {
		switch e.Payload.(type) {
		case *event.RunStarted, *event.RunDelayFired:
			started = true
		case *event.RunAdmitted:
			admitted = true
		}
		ended = ended || e.Type().Terminal()
	}
	switch {
	case started && s.Queued() && !s.Delayed:
		w := limits.Waiting{RunID: s.RunID, Definition: s.Spec.Definition, Queue: s.Queue, Priority: s.Priority,
			Control: s.Control, StartedAt: s.StartedAt}
		b, err := json.Marshal(w)
		if err != nil {
			return err
		}
		if _, err := c.queue.Put(ctx, s.RunID, b); err != nil {
			return fmt.Errorf("queueing run %q for admission: %w", s.RunID, err)
		}
	case started || admitted || ended:
		if err := c.queue.Delete(ctx, s.RunID); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("taking run %q off the admission queue: %w", s.RunID, err)
		}
	}
	if !s.Terminal() || !ended {
		return nil
	}
	if err := c.faults.Hit(fault.HistoryBeforeRelease); err != nil {
		return err
	}
	if err := c.release(ctx, s.Control.Group, s.RunID); err != nil {
		return fmt.Errorf("releasing the flow-control slot of run %q: %w", s.RunID, err)
	}
	return nil
}

// release frees run runID's slot in group and returns once that is written. Releases that lanes
// ask for while a write of the group is being prepared join it: many runs ending at once cost
// one compare-and-set, not one each competing for the same entry.
func (c *control) release(ctx context.Context, group, runID string) error {
	c.mu.Lock()
	b, joined := c.releases[group]
	if !joined {
		b = &releaseBatch{done: make(chan struct{})}
		c.releases[group] = b
	}
	b.runs = append(b.runs, runID)
	c.mu.Unlock()
	if !joined {
		go c.write(context.WithoutCancel(ctx), group, b)
	}
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write releases the slots of batch b of group, once no lane can join it any more.
func (c *control) write(ctx context.Context, group string, b *releaseBatch) {
	// closed takes b out of the lanes' reach, so that releases asked for later start the next
	// batch, whether this one is written or failed.
	closed := func() []string {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.releases[group] == b {
			delete(c.releases, group)
		}
		return b.runs
	}
	defer close(b.done)
	defer closed()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b.err = c.limits.Update(ctx, group, func(st *limits.State) bool {
		runs := closed()
		changed := false
		for _, run := range runs {
			changed = st.Release(run) || changed
		}
		return changed
	})
}

// stepWaits lists the attempts of s in flight that wait for a slot of their step's limit, as
// the workers recorded them in FLOW_LIMITS. A step without a limit has no entry; a read that
// fails shows nothing.
func (c *control) stepWaits(ctx context.Context, s *core.Snapshot) []api.StepWait {
	var out []api.StepWait
	states := map[string]*limits.StepState{}
	for _, id := range s.InFlight() {
		st := s.Steps[id]
		state, read := states[st.Name]
		if !read {
			state, _ = c.limits.LoadStep(ctx, st.Name)
			states[st.Name] = state
		}
		if state == nil {
			continue
		}
		if w, ok := state.Waiting[limits.AttemptKey(s.RunID, id, st.Attempt)]; ok {
			out = append(out, api.StepWait{StepID: id, Name: st.Name, Attempt: st.Attempt, Why: w.Why, Since: w.Since})
		}
	}
	return out
}
