package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// ApplyCommit carries out what commit, one append to run s.RunID, implies outside the run (see
// core.Derive): it registers the timers the commit scheduled and deletes those it made moot,
// starts the child runs it scheduled, sends the resume task of an input no decision answered
// yet, and, when the commit ended the run, does the end-of-run work (afterEnd) and releases the
// run's hook tokens. s is the run's snapshot at or after the commit's last event.
//
// Every effect is idempotent and guarded by the history, so applying a commit twice, late, or
// on two replicas at once is harmless. On an error some effects may be done and others not;
// the caller applies the commit again.
func (e *Engine) ApplyCommit(ctx context.Context, s *core.Snapshot, commit []event.Envelope) error {
	c := core.Derive(s, commit)
	if len(c.Timers) > 0 {
		if err := e.host.ScheduleTimers(ctx, c.Timers); err != nil {
			return fmt.Errorf("registering timers of run %q: %w", s.RunID, err)
		}
	}
	if len(c.Moot) > 0 {
		if err := e.host.DeleteTimers(ctx, c.Moot); err != nil {
			return fmt.Errorf("deleting moot timers of run %q: %w", s.RunID, err)
		}
	}
	for _, spec := range c.Children {
		if err := e.startChild(ctx, s, spec); err != nil {
			return err
		}
	}
	if err := e.cancelChildren(ctx, s.RunID, c.CancelRuns); err != nil {
		return err
	}
	if c.Resume {
		// A new run's task from here is a copy of its starter's, which may have been offered.
		t := Task{RunID: s.RunID, Queue: s.Queue, Build: s.Spec.BuildID, Seq: c.TaskSeq, TraceParent: s.TraceParent, Offered: c.TaskSeq == 1}
		if err := e.host.Resume(ctx, t); err != nil {
			return err
		}
	}
	if err := e.applyStartPolicy(ctx, s, commit); err != nil {
		return err
	}
	if err := e.applyReset(ctx, s, commit); err != nil {
		return err
	}
	if c.Ended {
		if err := e.afterEnd(ctx, s); err != nil {
			return err
		}
		for _, h := range s.Hooks {
			if err := e.host.ReleaseHook(ctx, h.Token, s.RunID, h.ID); err != nil {
				return fmt.Errorf("releasing hook %q of run %q: %w", h.ID, s.RunID, err)
			}
		}
	}
	return nil
}

// startChild starts a scheduled child run, idempotently, with the spec its parent recorded. A
// child whose run ID is taken by an unrelated run is settled as failed in the parent.
func (e *Engine) startChild(ctx context.Context, parent *core.Snapshot, c event.ChildSpec) error {
	spec := event.Spec{Definition: c.Definition, BuildID: c.BuildID, Patches: c.Patches}
	_, _, err := e.Start(inTrace(ctx, parent), StartParams{RunID: c.RunID, Spec: spec, Input: c.Input,
		Queue: parent.Queue, Parent: &event.ParentRef{RunID: parent.RunID, ChildID: c.ChildID, Attempt: core.ChildAttempt(parent, c.ChildID, c.RunID)},
		Priority: parent.Priority})
	var exists *RunExistsError
	if errors.As(err, &exists) {
		info := event.ErrorInfo{Kind: "run_exists", Message: err.Error()}
		err := e.external(ctx, parent.RunID, func(s *core.Snapshot) ([]event.Payload, error) {
			return core.ChildStartFailed(s, c.ChildID, info)
		})
		if errors.Is(err, core.ErrStale) {
			return nil
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("starting child %q of run %q: %w", c.ChildID, parent.RunID, err)
	}
	return nil
}

// afterEnd carries out what an ended run implies for other runs: its parent learns how it ended,
// children it leaves behind are asked to cancel (unless abandoned), and a continuation starts.
// It is idempotent; a worker runs it when its drive ends a run, and the history service for
// every terminal commit.
func (e *Engine) afterEnd(ctx context.Context, s *core.Snapshot) error {
	o := s.Outcome
	if o.Outcome == event.OutcomeContinuedAsNew {
		if err := e.startSuccessor(ctx, s); err != nil {
			return err
		}
	} else if s.Parent != nil {
		err := e.external(ctx, s.Parent.RunID, func(p *core.Snapshot) ([]event.Payload, error) {
			return core.SettleChild(p, s.Parent.ChildID, s)
		})
		if err != nil && !errors.Is(err, core.ErrStale) && !errors.Is(err, store.ErrDeleted) {
			return fmt.Errorf("settling child %q in parent %q: %w", s.Parent.ChildID, s.Parent.RunID, err)
		}
	}
	for _, c := range s.Children {
		if c.Settled || c.CancelPolicy != event.CancelPolicyRequest {
			continue
		}
		err := e.cancelChild(ctx, c.CurrentRunID(), s.RunID, fmt.Sprintf("parent run %q ended (%s)", s.RunID, o.Outcome))
		if err != nil && !errors.Is(err, core.ErrTerminal) && !errors.Is(err, core.ErrNotFound) && !errors.Is(err, store.ErrDeleted) {
			return fmt.Errorf("requesting cancellation of child %q of run %q: %w", c.ID, s.RunID, err)
		}
	}
	return nil
}

// startSuccessor starts the run that s, a run that continued as new, continues as.
func (e *Engine) startSuccessor(ctx context.Context, s *core.Snapshot) error {
	o := s.Outcome
	_, _, err := e.Start(inTrace(ctx, s), StartParams{RunID: o.SuccessorRunID, Spec: s.Spec, Input: o.Input, Queue: s.Queue,
		Parent: s.Parent, ContinuedFrom: s.RunID, Generation: s.Generation + 1, Attributes: s.Attributes, Priority: s.Priority, Control: s.Control,
		ExecutionTimeout: successorTimeout(s, true), RunTimeout: successorTimeout(s, false), InheritedTimeouts: s.Timeouts})
	if err != nil {
		return fmt.Errorf("starting the continuation of run %q: %w", s.RunID, err)
	}
	return nil
}

// cancelChildren asks the child runs of run runID that a commit cancels (ctx.CancelChild with
// try_cancel or wait_cancelled) to cancel: run.cancel_requested in each, idempotently. A run that
// ended already, or that never started (a child waiting out a retry backoff), needs nothing.
func (e *Engine) cancelChildren(ctx context.Context, runID string, runs []core.CancelRun) error {
	for _, r := range runs {
		err := e.cancelChild(ctx, r.RunID, runID, r.Reason)
		if err != nil && !errors.Is(err, core.ErrTerminal) && !errors.Is(err, core.ErrNotFound) && !errors.Is(err, store.ErrDeleted) {
			return fmt.Errorf("requesting cancellation of child run %q of run %q: %w", r.RunID, runID, err)
		}
	}
	return nil
}

// cancelChild asks run childID, a child of run parentID, or the latest run it continued as, to
// cancel, as Cancel does, with a run.cancel_requested that names parentID: a request a parent
// makes is no input (internal/inputsig), and workers, which drive parents and cannot sign
// inputs, write it. A run that is not parentID's child (a later run that reuses its ID) is left
// alone with an error wrapping core.ErrNotFound. Asking again is accepted without effect.
func (e *Engine) cancelChild(ctx context.Context, childID, parentID, reason string) error {
	_, err := e.forward(ctx, childID, func(s *core.Snapshot) ([]event.Payload, error) {
		if s.Seq > 0 && (s.Parent == nil || s.Parent.RunID != parentID) {
			return nil, fmt.Errorf("%w: run %q is not a child of run %q", core.ErrNotFound, s.RunID, parentID)
		}
		events, err := core.RequestCancel(s, reason)
		for _, p := range events {
			if rc, ok := p.(*event.RunCancelRequested); ok {
				rc.Parent = parentID
			}
		}
		return events, err
	})
	if errors.Is(err, core.ErrDuplicate) {
		return nil
	}
	return err
}
