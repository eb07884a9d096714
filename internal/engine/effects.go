package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// repair redoes the effects outside the run that its history implies and that a crash may have
// cut short: timers registered, hook tokens routed, child runs started. It runs whenever a
// driver loads a run without a cached snapshot. Every effect is idempotent.
func (e *Engine) repair(ctx context.Context, s *core.Snapshot) error {
	if s.Terminal() {
		return nil
	}
	if ts := core.Timers(s); len(ts) > 0 {
		if err := e.host.ScheduleTimers(ctx, ts); err != nil {
			return fmt.Errorf("re-registering timers of run %q: %w", s.RunID, err)
		}
	}
	for _, h := range s.Hooks {
		if h.Received {
			continue
		}
		if err := e.host.RegisterHook(ctx, h.Token, s.RunID, h.ID); err != nil {
			if !errors.Is(err, ErrTokenTaken) {
				return fmt.Errorf("re-registering hook %q of run %q: %w", h.ID, s.RunID, err)
			}
			e.logger.WarnContext(ctx, "hook token routes elsewhere", slog.String("run_id", s.RunID), slog.String("hook_id", h.ID))
		}
	}
	for _, c := range s.Children {
		if c.Settled {
			continue
		}
		spec := event.ChildSpec{ChildID: c.ID, RunID: c.RunID, Definition: c.Definition, Input: c.Input, CancelPolicy: c.CancelPolicy}
		if err := e.startChild(ctx, s, spec); err != nil {
			return err
		}
	}
	return nil
}

// startChild starts a scheduled child run, idempotently, pinned like new runs of this engine's
// code. A child whose run ID is taken by an unrelated run is settled as failed in the parent.
func (e *Engine) startChild(ctx context.Context, parent *core.Snapshot, c event.ChildSpec) error {
	spec := event.Spec{Definition: c.Definition}
	if e.rt != nil {
		// The child runs this build's code of its definition, with its patch markers.
		if id, err := e.rt.Identity(c.Definition); err == nil {
			spec.BuildID, spec.Patches = id.BuildID, id.Patches
		}
	}
	_, _, err := e.Start(ctx, StartParams{RunID: c.RunID, Spec: spec, Input: c.Input,
		Queue: parent.Queue, Parent: &event.ParentRef{RunID: parent.RunID, ChildID: c.ChildID}})
	var exists *RunExistsError
	if errors.As(err, &exists) {
		info := event.ErrorInfo{Kind: "run_exists", Message: err.Error()}
		return e.external(ctx, parent.RunID, func(s *core.Snapshot) ([]event.Payload, error) {
			return core.ChildStartFailed(s, c.ChildID, info)
		})
	}
	if err != nil {
		return fmt.Errorf("starting child %q of run %q: %w", c.ChildID, parent.RunID, err)
	}
	return nil
}

// afterEnd carries out what an ended run implies for other runs: its parent learns how it ended,
// children it leaves behind are asked to cancel (unless abandoned), and a continuation starts.
// It is idempotent and runs every time a driver finds the run ended.
func (e *Engine) afterEnd(ctx context.Context, s *core.Snapshot) error {
	o := s.Outcome
	if o.Outcome == event.OutcomeContinuedAsNew {
		_, _, err := e.Start(ctx, StartParams{RunID: o.SuccessorRunID, Spec: s.Spec, Input: o.Input, Queue: s.Queue,
			Parent: s.Parent, ContinuedFrom: s.RunID, Generation: s.Generation + 1})
		if err != nil {
			return fmt.Errorf("starting the continuation of run %q: %w", s.RunID, err)
		}
	} else if s.Parent != nil {
		err := e.external(ctx, s.Parent.RunID, func(p *core.Snapshot) ([]event.Payload, error) {
			return core.SettleChild(p, s.Parent.ChildID, s)
		})
		if err != nil && !errors.Is(err, core.ErrStale) {
			return fmt.Errorf("settling child %q in parent %q: %w", s.Parent.ChildID, s.Parent.RunID, err)
		}
	}
	for _, c := range s.Children {
		if c.Settled || c.CancelPolicy != event.CancelPolicyRequest {
			continue
		}
		if err := e.cancelChain(ctx, c.RunID, fmt.Sprintf("parent run %q ended (%s)", s.RunID, o.Outcome)); err != nil {
			return err
		}
	}
	return nil
}

// cancelChain requests cancellation of run runID, or of the run it continued as.
func (e *Engine) cancelChain(ctx context.Context, runID, reason string) error {
	for range 1000 {
		err := e.external(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
			if o := s.Outcome; o != nil && o.Outcome == event.OutcomeContinuedAsNew {
				runID = o.SuccessorRunID
				return nil, errFollow
			}
			return core.RequestCancel(s, reason)
		})
		switch {
		case errors.Is(err, errFollow):
			continue
		case err == nil, errors.Is(err, core.ErrDuplicate), errors.Is(err, core.ErrTerminal), errors.Is(err, core.ErrNotFound):
			return nil
		default:
			return fmt.Errorf("requesting cancellation of run %q: %w", runID, err)
		}
	}
	return fmt.Errorf("run %q continued as new more than 1000 times while being cancelled", runID)
}

var errFollow = errors.New("follow the continuation")
