package core

import (
	"fmt"
	"slices"

	"github.com/flowrun/flow/pkg/event"
)

// Kinds of decision identities. All share one namespace per run.
const (
	kindStep       = "step"
	kindWait       = "wait"
	kindSignalWait = "signal_wait"
	kindHook       = "hook"
	kindChild      = "child"
)

// Apply folds one committed event into the snapshot. The event must carry the next sequence.
// Apply checks the history invariants that concern this event first and returns a *HistoryError,
// leaving the snapshot unchanged, if one is broken. Its cost does not depend on history length.
func (s *Snapshot) Apply(e event.Envelope) error {
	if err := s.check(e); err != nil {
		return err
	}
	s.mutate(e)
	s.Seq = e.Seq
	s.UpdatedAt = e.Time
	s.Progress.Events++
	if isDecisionEvent(e.Payload) {
		s.Progress.Decisions++
		s.Blocked = nil
		s.decidedSeq = e.Seq
		s.inputTraces = nil
	}
	_, failed := e.Payload.(*event.DecisionFailed)
	if failed {
		s.decidedSeq = e.Seq
		s.inputTraces = nil
	}
	if tp := inputTrace(e.Payload); tp != "" {
		s.inputTraces = append(s.inputTraces, tp)
	}
	prev := s.Status
	s.Status = s.status()
	_, reset := e.Payload.(*event.RunReset)
	if s.Status != prev || failed || reset || e.Type().Terminal() || changesAttributes(e.Payload) {
		s.summarySeq, s.summaryAt = e.Seq, e.Time
	}
	return nil
}

// IsInput reports whether p comes from outside the run's driver and asks for a decision: the
// run's start, a delivery (signal, hook), a timer or retry backoff that elapsed, a child that
// ended, or a cancellation request. Step results are not inputs: the worker that runs a step
// decides on its result itself, and the task it holds is redelivered if it dies.
func IsInput(p event.Payload) bool {
	switch p := p.(type) {
	case *event.RunStarted, *event.SignalReceived, *event.HookReceived, *event.WaitFired,
		*event.StepRetryFired, *event.RunCancelRequested, *event.UpdateReceived,
		*event.RunDelayFired, *event.RunAdmitted, *event.RunUnpaused:
		return true
	case *event.StepFailed:
		// A step timeout is appended by the scheduler, not by the worker that ran the attempt
		// (which may be dead): the run needs a drive as after any input (docs/timeouts.md).
		return p.Timeout != ""
	case *event.ChildSettled:
		// A child the workflow cancelled settles in the workflow's own decision.
		return p.Cancellation == ""
	}
	return false
}

// inputTrace returns the traceparent an input recorded, or "".
func inputTrace(p event.Payload) string {
	switch p := p.(type) {
	case *event.SignalReceived:
		return p.TraceParent
	case *event.HookReceived:
		return p.TraceParent
	case *event.RunCancelRequested:
		return p.TraceParent
	case *event.UpdateReceived:
		return p.TraceParent
	case *event.RunUnpaused:
		return p.TraceParent
	}
	return ""
}

// isDecisionEvent reports whether p is produced by a decision (workflow code or the automatic
// transitions of Decide) rather than by a step result, timer, delivery or operator.
func isDecisionEvent(p event.Payload) bool {
	switch p := p.(type) {
	case *event.StepScheduled, *event.WaitScheduled, *event.SignalAwaited, *event.HookCreated,
		*event.ChildScheduled, *event.RunCompleted, *event.RunContinuedAsNew, *event.AttributesUpserted,
		*event.UpdateAccepted, *event.UpdateRejected, *event.UpdateCompleted:
		return true
	case *event.SideEffectRecorded, *event.StepCancelRequested, *event.ChildCancelRequested:
		return true
	case *event.ChildSettled:
		// ctx.CancelChild with try_cancel or abandon; wait_cancelled settles by its request's commit.
		return p.Cancellation == event.CancelTry || p.Cancellation == event.CancelAbandon
	case *event.StepCancelled:
		// A wait_cancelled cancellation settles when the attempt ends: a step result.
		if p.Cancellation == event.CancelWait {
			return false
		}
		return p.Cause != event.CauseOperator && p.Cause != event.CauseFlowControl && p.Cause != event.CauseTimeout
	case *event.RunFailed:
		return p.Cause != event.CauseOperator && p.Cause != event.CauseTimeout
	case *event.RunCancelled:
		return p.Cause != event.CauseOperator && p.Cause != event.CauseFlowControl
	}
	return false
}

func (s *Snapshot) fail(e event.Envelope, rule, format string, args ...any) error {
	return &HistoryError{RunID: s.RunID, Seq: e.Seq, Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

// check validates e against the snapshot without changing it.
func (s *Snapshot) check(e event.Envelope) error {
	if e.Payload == nil {
		return s.fail(e, "sequence", "event has no payload")
	}
	if err := e.Payload.Validate(); err != nil {
		return s.fail(e, "malformed", "%s: %v", e.Type(), err)
	}
	if e.RunID != s.RunID {
		return s.fail(e, "run_id", "event belongs to run %q", e.RunID)
	}
	if e.Seq != s.Seq+1 {
		return s.fail(e, "sequence", "expected seq %d, got %d (sequences run 1..n without gaps)", s.Seq+1, e.Seq)
	}
	if s.DeletedSeq > 0 {
		return s.fail(e, "after_deleted", "%s after run.deleted at seq %d: nothing follows a deletion", e.Type(), s.DeletedSeq)
	}
	if _, deleted := e.Payload.(*event.RunDeleted); deleted {
		switch {
		case s.Outcome == nil:
			return s.fail(e, "deleted_active", "run.deleted of a run that has not ended")
		case s.resetEnding:
			return s.fail(e, "reset_order", "run.deleted while the termination of a run.reset is due")
		}
		return nil
	}
	if _, reset := e.Payload.(*event.RunReset); reset {
		return s.checkReset(e) // may follow the terminal event
	}
	if _, accepted := e.Payload.(*event.RunDamageAccepted); accepted {
		// An operator's release of a damaged history may follow anything but nothing.
		if s.Seq == 0 {
			return s.fail(e, "first_event", "the first event must be run.started, got %s", e.Type())
		}
		return nil
	}
	if s.resetEnding {
		if err := s.checkResetEnding(e); err != nil {
			return err
		}
	}
	if s.Outcome != nil {
		return s.fail(e, "after_terminal", "%s after the terminal event at seq %d", e.Type(), s.Outcome.Seq)
	}
	if _, first := e.Payload.(*event.RunStarted); first != (s.Seq == 0) {
		if first {
			return s.fail(e, "first_event", "run.started may only be the first event")
		}
		return s.fail(e, "first_event", "the first event must be run.started, got %s", e.Type())
	}
	if err := s.checkAdmission(e); err != nil {
		return err
	}
	if err := s.checkPause(e); err != nil {
		return err
	}
	if s.expectRetry != "" {
		if pp, ok := e.Payload.(*event.RunPaused); ok && pp.Cause == event.PauseStepExhausted && pp.StepID == s.expectRetry {
			// The step exhausted its attempts and its policy pauses the run (checkPause).
		} else if r, ok := e.Payload.(*event.StepRetryScheduled); !ok || r.StepID != s.expectRetry {
			return s.fail(e, "retry_order", "step %q failed with attempts left, so step.retry_scheduled must follow; got %s", s.expectRetry, e.Type())
		}
	}
	if err := s.checkDelay(e); err != nil {
		return err
	}
	if err := s.checkCancel(e); err != nil {
		return err
	}
	if err := s.checkChildRetry(e); err != nil {
		return err
	}
	switch p := e.Payload.(type) {
	case *event.StepScheduled:
		return s.checkNew(e, stepIDs(p.Steps))
	case *event.StepCompleted:
		return s.checkInFlight(e, p.StepID, p.Attempt)
	case *event.StepFailed:
		return s.checkInFlight(e, p.StepID, p.Attempt)
	case *event.StepRetryScheduled:
		st, err := s.step(e, p.StepID)
		if err != nil {
			return err
		}
		// A step held by its exhaustion gets its fresh attempt once the run is unpaused.
		rearm := st.Held && s.Paused == nil && st.Status == StepRetrying
		if s.expectRetry != p.StepID && !rearm || p.Attempt != st.Attempt+1 {
			return s.fail(e, "retry_order", "retry of step %q attempt %d does not follow a failure of attempt %d", p.StepID, p.Attempt, p.Attempt-1)
		}
	case *event.StepRetryFired:
		st, err := s.step(e, p.StepID)
		if err != nil {
			return err
		}
		if st.Status != StepRetrying || st.Attempt != p.Attempt {
			return s.fail(e, "step_state", "retry of step %q attempt %d fired, but the step is %s at attempt %d", p.StepID, p.Attempt, st.Status, st.Attempt)
		}
	case *event.StepCancelled:
		seen := map[string]bool{}
		for _, c := range p.Steps {
			st, err := s.step(e, c.StepID)
			if err != nil {
				return err
			}
			if seen[c.StepID] {
				return s.fail(e, "duplicate_id", "step.cancelled lists step %q twice", c.StepID)
			}
			if st.Status.Settled() {
				return s.fail(e, "step_state", "step %q cancelled, but it already settled as %s", c.StepID, st.Status)
			}
			seen[c.StepID] = true
		}
	case *event.WaitScheduled:
		return s.checkNew(e, []string{p.WaitID})
	case *event.WaitFired:
		return checkOnce(s, e, s.Waits, p.WaitID, "wait", "scheduled", "duplicate_id", "fired",
			func(w *Wait) (bool, uint64) { return w.Fired, w.FiredSeq })
	case *event.SignalAwaited:
		return s.checkNew(e, []string{p.WaitID})
	case *event.SignalReceived:
		if _, dup := s.deliveries[p.DeliveryID]; dup {
			return s.fail(e, "duplicate_delivery", "signal delivery %q was already received", p.DeliveryID)
		}
	case *event.HookCreated:
		if err := s.checkNew(e, []string{p.HookID}); err != nil {
			return err
		}
		if owner, dup := s.tokens[p.Token]; dup {
			return s.fail(e, "duplicate_id", "hook %q reuses the token of hook %q", p.HookID, owner)
		}
	case *event.HookReceived:
		return checkOnce(s, e, s.Hooks, p.HookID, "hook", "created", "hook_state", "received a delivery",
			func(h *Hook) (bool, uint64) { return h.Received, h.ReceivedSeq })
	case *event.ChildScheduled:
		return s.checkNew(e, childIDs(p.Children))
	case *event.ChildSettled:
		return checkOnce(s, e, s.Children, p.ChildID, "child", "scheduled", "child_state", "settled",
			func(c *Child) (bool, uint64) { return c.Settled, c.SettledSeq })
	case *event.SideEffectRecorded:
		return s.checkNew(e, []string{p.SideEffectID})
	case *event.AttributesUpserted:
		return s.checkNew(e, []string{p.UpsertID})
	case *event.RunCancelRequested:
		if s.CancelRequested {
			return s.fail(e, "cancel_state", "cancellation was already requested")
		}
		if p.Parent != "" && (s.Parent == nil || s.Parent.RunID != p.Parent) {
			return s.fail(e, "cancel_parent", "run.cancel_requested names run %q as the parent that asked for it, and that run is not this run's parent", p.Parent)
		}
	case *event.UpdateReceived, *event.UpdateAccepted, *event.UpdateRejected, *event.UpdateCompleted:
		return s.checkUpdate(e)
	case *event.RunCompleted, *event.RunFailed, *event.RunCancelled, *event.RunContinuedAsNew:
		if u := s.Progress.StepsRunning + s.Progress.StepsRetrying; u > 0 {
			return s.fail(e, "unsettled_at_end", "%s while %d step(s) are unsettled: %v (step.cancelled must settle them first)", e.Type(), u, s.Unsettled())
		}
	}
	return nil
}

// checkOnce checks an event that happens to the item id of m once: the item, a kind (e.g.
// "wait") that became known when it was made (e.g. "scheduled"), must exist (else rule
// unknown_id) and not be done yet (else the given rule, naming what it did and at which
// sequence, as done reports them).
func checkOnce[T any](s *Snapshot, e event.Envelope, m map[string]*T, id, kind, made, rule, did string, done func(*T) (bool, uint64)) error {
	x, ok := m[id]
	if !ok {
		return s.fail(e, "unknown_id", "%s %q was never %s", kind, id, made)
	}
	if ok, seq := done(x); ok {
		return s.fail(e, rule, "%s %q already %s at seq %d", kind, id, did, seq)
	}
	return nil
}

func (s *Snapshot) checkNew(e event.Envelope, ids []string) error {
	var seen idSet
	for _, id := range ids {
		if kind, used := s.ids[id]; used {
			return s.fail(e, "duplicate_id", "%s reuses ID %q, already a %s", e.Type(), id, kind)
		}
		if !seen.add(id) {
			return s.fail(e, "duplicate_id", "%s lists ID %q twice", e.Type(), id)
		}
	}
	return nil
}

// idSet is a set of IDs that a batch lists, for finding a repeated one in time linear in the
// batch's size. The zero value is empty.
type idSet struct {
	few  []string
	many map[string]struct{}
}

// idSetFew is the size up to which idSet scans a slice instead of hashing.
const idSetFew = 16

// add adds id and reports whether it was new.
func (t *idSet) add(id string) bool {
	if t.many == nil {
		if slices.Contains(t.few, id) {
			return false
		}
		if len(t.few) < idSetFew {
			t.few = append(t.few, id)
			return true
		}
		t.many = make(map[string]struct{}, 2*idSetFew)
		for _, f := range t.few {
			t.many[f] = struct{}{}
		}
	}
	if _, ok := t.many[id]; ok {
		return false
	}
	t.many[id] = struct{}{}
	return true
}

// vetStep reports whether a recorded step's ID, name and retry policy are valid, and the
// policy normalized: what Validate records for a decision, so that a decision equal to them is
// valid too.
func vetStep(st event.StepSpec) bool {
	return event.ValidateID("step", st.ID) == nil && event.ValidateName("step", st.Name) == nil &&
		normalized(&st.Retry) && st.Retry.Validate() == nil
}

// normalized reports whether *p is normalized.
func normalized(p *event.RetryPolicy) bool {
	n := p.Normalize()
	return sameRetry(p, &n)
}

// vetChild reports whether a recorded child's ID, definition and cancellation policy are valid,
// the policy explicit, and its derived run ID valid, as Validate records them for run runID.
func vetChild(runID string, c event.ChildSpec) bool {
	return event.ValidateID("child", c.ChildID) == nil && event.ValidateName("definition", c.Definition) == nil &&
		c.CancelPolicy != "" && c.CancelPolicy.Valid() && event.ValidateDerivedRunID(event.ChildRunID(runID, c.ChildID)) == nil &&
		(c.Retry == nil || normalized(c.Retry) && c.Retry.Validate() == nil)
}

func (s *Snapshot) step(e event.Envelope, id string) (*Step, error) {
	st, ok := s.Steps[id]
	if !ok {
		return nil, s.fail(e, "unknown_id", "step %q was never scheduled", id)
	}
	return st, nil
}

func (s *Snapshot) checkInFlight(e event.Envelope, id string, attempt int) error {
	st, err := s.step(e, id)
	if err != nil {
		return err
	}
	if st.Status.Settled() {
		return s.fail(e, "step_state", "%s for step %q attempt %d, but the step already settled (%s) at seq %d", e.Type(), id, attempt, st.Status, st.SettledSeq)
	}
	if st.Status != StepRunning || st.Attempt != attempt {
		return s.fail(e, "step_state", "%s for step %q attempt %d, but the step is %s at attempt %d", e.Type(), id, attempt, st.Status, st.Attempt)
	}
	return nil
}

// mutate applies a checked event.
//
// It and the checks above switch over the event types on purpose: they are the core's one
// interpreter of what each event means to a run's state, which no per-type declaration could
// express without moving the state machine into pkg/event. What code outside the core needs of
// every event alike (its payload fields, its summary) each type declares next to its payload
// type instead (event.Described), and nothing else switches for it.
func (s *Snapshot) mutate(e event.Envelope) {
	p := &s.Progress
	switch d := e.Payload.(type) {
	case *event.RunStarted:
		s.StartedAt = e.Time
		s.Spec = d.Spec
		s.Input = d.Input
		s.Queue = d.Queue
		s.Seed = d.Seed
		s.Parent = d.Parent
		s.ContinuedFrom = d.ContinuedFrom
		s.Generation = d.Generation
		s.TraceParent = d.TraceParent
		s.Attributes = d.Attributes.Merge(nil)
		s.StartPolicy = d.StartPolicy
		if !d.NotBefore.IsZero() {
			s.Delayed, s.NotBefore, s.NotBeforeSeq = true, d.NotBefore, e.Seq
		}
		s.Priority = d.Priority
		s.Control = d.Control
		s.Timeouts = d.Timeouts
		s.ResetFrom = d.ResetFrom
		s.Schedule = d.Schedule
	case *event.RunAdmitted:
		if s.readmits(e.Seq) {
			break // the old run's admission, copied by a reset: the new run is admitted anew
		}
		s.Admitted, s.AdmittedSeq, s.AdmittedAt = true, e.Seq, e.Time
	case *event.RunDebounced:
		s.Input, s.NotBefore, s.NotBeforeSeq = d.Input, d.NotBefore, e.Seq
		s.Debounced++
	case *event.RunDelayFired:
		s.Delayed = false
	case *event.StepScheduled:
		ids := make([]string, len(d.Steps))
		steps := make([]Step, len(d.Steps))
		members := make([]*Step, len(d.Steps))
		for i, st := range d.Steps {
			ids[i] = st.ID
			s.ids[st.ID] = kindStep
			step := &steps[i]
			*step = Step{ID: st.ID, Name: st.Name, Input: st.Input, Retry: st.Retry,
				BatchSeq: e.Seq, Status: StepRunning, Attempt: 1, pos: i, vetted: vetStep(st)}
			if !st.Timeouts.IsZero() {
				step.Timeouts, step.InFlightSince, step.InFlightSeq = st.Timeouts, e.Time, e.Seq
			}
			members[i] = step
			s.Steps[st.ID] = step
			s.unsettled.push(step)
		}
		s.batches[e.Seq] = ids
		s.stepBatches[e.Seq] = members
		p.Steps += len(ids)
		p.StepsRunning += len(ids)
	case *event.StepCompleted:
		st := s.Steps[d.StepID]
		st.Status, st.Output, st.SettledSeq = StepCompleted, d.Output, e.Seq
		s.unsettled.remove(st)
		p.StepsRunning--
		p.StepsCompleted++
	case *event.StepFailed:
		st := s.Steps[d.StepID]
		errInfo := d.Error
		st.Error = &errInfo
		p.StepsRunning--
		if d.Final {
			st.Status, st.SettledSeq = StepFailed, e.Seq
			s.unsettled.remove(st)
			p.StepsFailed++
			if st.Retry.OnExhaustion != event.ExhaustionReturnError {
				s.exhausted = append(s.exhausted, d.StepID)
			}
		} else {
			st.Status = StepRetrying
			p.StepsRetrying++
			s.expectRetry = d.StepID
		}
	case *event.StepRetryScheduled:
		st := s.Steps[d.StepID]
		st.Attempt, st.RetryDue, st.RetrySeq = d.Attempt, d.Due, e.Seq
		st.Held = false
		s.TimerSeq = e.Seq
		s.expectRetry = ""
	case *event.StepRetryFired:
		st := s.Steps[d.StepID]
		st.Status, st.RetryDue = StepRunning, zeroTime
		if st.Timeouts != nil {
			st.InFlightSince, st.InFlightSeq = e.Time, e.Seq
		}
		p.StepsRetrying--
		p.StepsRunning++
	case *event.StepCancelled:
		for _, c := range d.Steps {
			st := s.Steps[c.StepID]
			if st.Status == StepRunning {
				p.StepsRunning--
			} else {
				p.StepsRetrying--
			}
			st.Status, st.Attempt, st.SideEffectUnknown, st.SettledSeq = StepCancelled, c.Attempt, c.SideEffectUnknown, e.Seq
			st.RetryDue = zeroTime
			s.unsettled.remove(st)
			p.StepsCancelled++
		}
	case *event.WaitScheduled:
		s.ids[d.WaitID] = kindWait
		s.Waits[d.WaitID] = &Wait{ID: d.WaitID, Deadline: d.Deadline.UTC(), Duration: d.Duration, Seq: e.Seq}
		p.WaitsPending++
		s.TimerSeq = e.Seq
	case *event.WaitFired:
		w := s.Waits[d.WaitID]
		w.Fired, w.FiredSeq = true, e.Seq
		p.WaitsPending--
		p.WaitsFired++
	case *event.SignalAwaited:
		s.ids[d.WaitID] = kindSignalWait
		w := &SignalWait{ID: d.WaitID, Name: d.Name, Seq: e.Seq, Signal: -1}
		s.SignalWaits[d.WaitID] = w
		if q := s.buffered[d.Name]; len(q) > 0 {
			s.bind(w, q[0])
			s.buffered[d.Name] = q[1:]
		} else {
			s.awaiting[d.Name] = append(s.awaiting[d.Name], d.WaitID)
			p.SignalWaits++
		}
	case *event.SignalReceived:
		idx := len(s.Signals)
		s.Signals = append(s.Signals, &Signal{Name: d.Name, Payload: d.Payload, DeliveryID: d.DeliveryID, Seq: e.Seq})
		s.deliveries[d.DeliveryID] = struct{}{}
		p.SignalsReceived++
		if q := s.awaiting[d.Name]; len(q) > 0 {
			s.bind(s.SignalWaits[q[0]], idx)
			s.awaiting[d.Name] = q[1:]
			p.SignalWaits--
		} else {
			s.buffered[d.Name] = append(s.buffered[d.Name], idx)
		}
	case *event.HookCreated:
		s.ids[d.HookID] = kindHook
		s.tokens[d.Token] = d.HookID
		s.Hooks[d.HookID] = &Hook{ID: d.HookID, Token: d.Token, Metadata: d.Metadata, Seq: e.Seq}
		p.HooksPending++
	case *event.HookReceived:
		h := s.Hooks[d.HookID]
		h.Received, h.Payload, h.DeliveryID, h.ReceivedSeq = true, d.Payload, d.DeliveryID, e.Seq
		p.HooksPending--
		p.HooksReceived++
	case *event.ChildScheduled:
		ids := make([]string, len(d.Children))
		members := make([]*Child, len(d.Children))
		for i, c := range d.Children {
			ids[i] = c.ChildID
			s.ids[c.ChildID] = kindChild
			members[i] = &Child{ID: c.ChildID, RunID: c.RunID, Definition: c.Definition,
				Input: c.Input, CancelPolicy: c.CancelPolicy, BuildID: c.BuildID, Patches: c.Patches, BatchSeq: e.Seq, Retry: c.Retry,
				vetted: vetChild(s.RunID, c)}
			s.Children[c.ChildID] = members[i]
		}
		s.batches[e.Seq] = ids
		s.childBatches[e.Seq] = members
		p.ChildrenPending += len(ids)
	case *event.ChildSettled:
		c := s.Children[d.ChildID]
		c.Settled, c.Outcome, c.EndedRunID, c.Output, c.Error, c.SettledSeq = true, d.Outcome, d.RunID, d.Output, d.Error, e.Seq
		p.ChildrenPending--
		p.ChildrenSettled++
	case *event.SideEffectRecorded:
		s.ids[d.SideEffectID] = kindSideEffect
		s.SideEffects[d.SideEffectID] = &SideEffect{ID: d.SideEffectID, Value: d.Value, Seq: e.Seq}
	case *event.AttributesUpserted:
		s.upserted(e, d)
	case *event.RunCancelRequested:
		s.CancelRequested, s.CancelReason = true, d.Reason
		if d.DeliveryID != "" {
			s.deliveries[d.DeliveryID] = struct{}{}
		}
	case *event.RunPaused, *event.RunUnpaused:
		s.mutatePause(e)
	case *event.DecisionFailed:
		s.Blocked = blockedBy(e, d)
	case *event.UpdateReceived, *event.UpdateAccepted, *event.UpdateRejected, *event.UpdateCompleted:
		s.mutateUpdate(e)
	case *event.RunCompleted, *event.RunFailed, *event.RunCancelled, *event.RunContinuedAsNew:
		s.Outcome = outcomeOf(e)
		if f, ok := d.(*event.RunFailed); ok && f.DeliveryID != "" {
			s.deliveries[f.DeliveryID] = struct{}{}
		}
		s.resetEnding = false
	case *event.RunReset:
		s.mutateReset(e, d)
	case *event.RunDeleted:
		s.DeletedSeq = e.Seq
	}
	s.mutateCancel(e)
	s.mutateChildRetry(e)
}

func blockedBy(e event.Envelope, d *event.DecisionFailed) *Blocked {
	return &Blocked{Kind: d.Kind, Code: d.Code, Detail: d.Detail, BuildID: d.BuildID, Seq: e.Seq, Mismatch: d.Mismatch}
}

// outcomeOf returns the outcome a terminal event records, or nil for another event.
func outcomeOf(e event.Envelope) *Outcome {
	switch d := e.Payload.(type) {
	case *event.RunCompleted:
		return &Outcome{Outcome: event.OutcomeCompleted, Output: d.Output, Cause: event.CauseWorkflow, Seq: e.Seq, Time: e.Time}
	case *event.RunFailed:
		errInfo := d.Error
		return &Outcome{Outcome: event.OutcomeFailed, Error: &errInfo, Cause: d.Cause, Seq: e.Seq, Time: e.Time}
	case *event.RunCancelled:
		return &Outcome{Outcome: event.OutcomeCancelled, Reason: d.Reason, Cause: d.Cause, Seq: e.Seq, Time: e.Time}
	case *event.RunContinuedAsNew:
		return &Outcome{Outcome: event.OutcomeContinuedAsNew, SuccessorRunID: d.SuccessorRunID, Input: d.Input,
			Cause: event.CauseWorkflow, Seq: e.Seq, Time: e.Time}
	}
	return nil
}

// Ending returns what a run's last event says of its end, without the rest of its history: if
// it is a terminal event, a snapshot holding the run's terminal status and outcome; if it is
// decision.failed, one holding status blocked and the diagnosis; otherwise false. Only RunID,
// Seq, UpdatedAt, Status, Outcome and Blocked are set.
func Ending(last event.Envelope) (*Snapshot, bool) {
	s := &Snapshot{RunID: last.RunID, Seq: last.Seq, UpdatedAt: last.Time}
	if d, ok := last.Payload.(*event.DecisionFailed); ok {
		s.Blocked = blockedBy(last, d)
	} else if s.Outcome = outcomeOf(last); s.Outcome == nil {
		return nil, false
	}
	s.Status = s.status()
	return s, true
}

func (s *Snapshot) bind(w *SignalWait, idx int) {
	w.Signal = idx
	s.Signals[idx].ConsumedBy = w.ID
}
