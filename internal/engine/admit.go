package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// LateAdmissionError reports that a run could not be admitted at the time its slot and rate
// token were taken at, because its latest event is recorded later (recorded times never go
// backwards): the admission controller gives the reservation back and admits the run again at a
// time no earlier than Latest.
type LateAdmissionError struct {
	RunID      string
	At, Latest time.Time
}

func (e *LateAdmissionError) Error() string {
	return fmt.Sprintf("flow: run %q cannot be admitted at %s: its latest event is recorded at %s", e.RunID,
		e.At.Format(time.RFC3339Nano), e.Latest.Format(time.RFC3339Nano))
}

// Admit appends run.admitted to run runID, recorded at exactly at (the time the admission
// controller took the run's slot and rate token at), and asks for the run to be driven. It
// returns an error wrapping core.ErrAdmitted when the run was admitted already, core.ErrStale
// when it needs no admission any more (it ended, or is being cancelled, unadmitted), and a
// *LateAdmissionError when the run's latest event is
// recorded after at.
func (e *Engine) Admit(ctx context.Context, runID string, at time.Time) error {
	at = at.UTC()
	atLeast := uint64(1)
	for {
		s, err := e.snapshot(ctx, runID, atLeast)
		if err != nil {
			return err
		}
		events, err := core.Admit(s, at)
		if err != nil {
			return err
		}
		if s.UpdatedAt.After(at) {
			return &LateAdmissionError{RunID: runID, At: at, Latest: s.UpdatedAt}
		}
		if err := e.append(ctx, runID, s.Seq, at, events); err != nil {
			var ce *store.ConflictError
			if errors.As(err, &ce) {
				atLeast = max(atLeast, ce.Actual) // an input came meanwhile: decide on the run as it is now
				continue
			}
			if errors.Is(err, store.ErrConflict) {
				continue
			}
			return err
		}
		committed := []event.Envelope{{RunID: runID, Seq: s.Seq + 1, Time: at, Payload: events[0]}}
		e.locks.poke(runID)
		e.resume(ctx, Task{RunID: runID, Queue: s.Queue, Build: s.Spec.BuildID, Seq: s.Seq + 1, TraceParent: s.TraceParent,
			Head: e.commitHead(runID, committed)})
		return nil
	}
}

// CancelByControl ends run runID as cancelled by its flow control (cause flow_control), with
// reason, cancelling its unsettled steps; the history service then releases its slots. It
// returns an error wrapping core.ErrTerminal when the run has ended already.
func (e *Engine) CancelByControl(ctx context.Context, runID, reason string) error {
	return e.external(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.CancelByControl(s, reason)
	})
}
