package history

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/pkg/event"
)

// control keeps the admission queue, FLOW_QUEUE, whose one writer is the history service: an
// entry for each run under flow control that waits for admission (started, its start delay over,
// not admitted, not ended), a projection of the run's latest snapshot (core.Snapshot.Queued),
// written as the service follows the history and repaired by its reconciler (reconcile.go). The
// admission controller (in the scheduler) reads it, and is the one writer of the slots
// (FLOW_LIMITS): it releases an ended run's slot when the runs index shows its end.
type control struct {
	queue *limits.Queue
	// steps reads the step limits' waiting attempts (FLOW_STEP_LIMITS), for the run's status.
	steps *limits.Store
}

func openControl(ctx context.Context, js jetstream.JetStream) (*control, error) {
	queue, err := limits.OpenQueue(ctx, js)
	if err != nil {
		return nil, err
	}
	steps, err := limits.OpenSteps(ctx, js)
	if err != nil {
		return nil, err
	}
	return &control{queue: queue, steps: steps}, nil
}

// apply brings run s.RunID's queue entry in line with s, the run's snapshot at or after commit,
// one append to the run: written while the run waits for admission, deleted once it is
// admitted, ended or deleted. Idempotent: applying a commit again, late, or after a later one
// leaves what the latest snapshot says.
func (c *control) apply(ctx context.Context, s *core.Snapshot, commit []event.Envelope) error {
	if s.Control == nil {
		return nil
	}
	// changed is set by a commit that can move the run in or out of the queue: its start (or
	// a delayed start's end), its admission, its end.
	changed := false
	for _, e := range commit {
		switch e.Payload.(type) {
		case *event.RunStarted, *event.RunDelayFired, *event.RunAdmitted:
			changed = true
		}
		changed = changed || e.Type().Terminal()
	}
	if !changed {
		return nil
	}
	if want, ok := queueEntry(s); ok {
		if err := c.queue.Put(ctx, want); err != nil {
			return fmt.Errorf("queueing run %q for admission: %w", s.RunID, err)
		}
		return nil
	}
	if err := c.queue.Delete(ctx, s.RunID, 0); err != nil {
		return fmt.Errorf("taking run %q off the admission queue: %w", s.RunID, err)
	}
	return nil
}

// queueEntry returns the FLOW_QUEUE entry run s must have, and false when it must have none:
// the projection of the queue, one run at a time.
func queueEntry(s *core.Snapshot) (limits.Waiting, bool) {
	if !s.Queued() || s.Delayed || s.DeletedSeq > 0 {
		return limits.Waiting{}, false
	}
	return limits.Waiting{RunID: s.RunID, Definition: s.Spec.Definition, Queue: s.Queue, Priority: s.Priority,
		Control: s.Control, StartedAt: s.StartedAt}, true
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
			state, _ = c.steps.LoadStep(ctx, st.Name)
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
