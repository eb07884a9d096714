package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// Verdict is the outcome of validating one decision against a snapshot.
type Verdict struct {
	// Events are the events to append after the snapshot's last sequence, in order, as one
	// commit. Empty when the decision is already recorded and still pending.
	Events []event.Payload
	// WaitingOn describes the recorded, still pending decision the code re-issued, e.g.
	// `step "read-rate"`. Set only when Events is empty.
	WaitingOn string
}

// Waiting reports whether the decision was already recorded and the run keeps waiting on it.
func (v Verdict) Waiting() bool { return len(v.Events) == 0 }

// Validate checks one decision against the snapshot of the history it was made from and returns
// the events to commit, or a waiting verdict when the identical decision is already recorded and
// pending. It returns a *NonDeterminismError when an identity the decision names is recorded with
// different fields (or as another kind), and an *InvalidDecisionError for a decision that can
// never be valid, including one that re-issues an identity that already settled. A batch's whole
// identity is checked before any member is considered. Validate does not modify s.
func Validate(s *Snapshot, d Decision) (Verdict, error) {
	if s.Seq == 0 {
		return Verdict{}, fmt.Errorf("%w: run %q has not started", ErrNotFound, s.RunID)
	}
	if s.Terminal() {
		return Verdict{}, fmt.Errorf("%w: run %q ended at seq %d", ErrTerminal, s.RunID, s.Outcome.Seq)
	}
	v := validation{s: s}
	switch d := d.(type) {
	case ScheduleSteps:
		return v.steps(d)
	case WaitUntil:
		if d.Deadline.IsZero() {
			return v.invalid("WaitUntil(%q) has no deadline", d.ID)
		}
		return v.wait(d.ID, &event.WaitScheduled{WaitID: d.ID, Deadline: d.Deadline.UTC()})
	case Sleep:
		if d.Duration <= 0 {
			return v.invalid("Sleep(%q) needs a positive duration, got %s", d.ID, d.Duration)
		}
		return v.wait(d.ID, &event.WaitScheduled{WaitID: d.ID, Deadline: s.UpdatedAt.Add(d.Duration).UTC(), Duration: event.Duration(d.Duration)})
	case AwaitSignal:
		return v.signal(d)
	case CreateHook:
		return v.hook(d)
	case StartChildren:
		return v.children(d)
	case Complete:
		out, err := CanonicalJSON(d.Output)
		if err != nil {
			return v.invalid("Complete output is not valid JSON: %v", err)
		}
		return v.end(&event.RunCompleted{Output: out}, event.CauseWorkflow, "the run completed before the step settled")
	case Fail:
		e := d.Error
		if e.Message == "" {
			e.Message = "workflow failed"
		}
		return v.end(&event.RunFailed{Error: e, Cause: event.CauseWorkflow}, event.CauseWorkflow, "the run failed before the step settled")
	case Cancel:
		cause := d.Cause
		if cause == "" {
			cause = event.CauseWorkflow
		}
		if cause != event.CauseWorkflow && cause != event.CauseCancelRequested {
			return v.invalid("Cancel cause must be workflow or cancel_requested, got %q", cause)
		}
		return v.end(&event.RunCancelled{Reason: d.Reason, Cause: cause}, cause, "the run was cancelled before the step settled")
	case ContinueAsNew:
		in, err := CanonicalJSON(d.Input)
		if err != nil {
			return v.invalid("ContinueAsNew input is not valid JSON: %v", err)
		}
		next := event.SuccessorRunID(s.RunID, s.Generation+1)
		if err := event.ValidateDerivedRunID(next); err != nil {
			return v.invalid("ContinueAsNew: successor run ID: %v", err)
		}
		return v.end(&event.RunContinuedAsNew{SuccessorRunID: next, Input: in}, event.CauseWorkflow, "the run continued as new before the step settled")
	case RecordSideEffect:
		return v.sideEffect(d)
	case UpsertAttributes:
		return v.upsert(d)
	case CompleteUpdate:
		return v.completeUpdate(d)
	case CancelStep:
		return v.cancelStep(d)
	case CancelChild:
		return v.cancelChild(d)
	case Invalid:
		return v.invalid("%s: %v", d.What, d.Err)
	case nil:
		return Verdict{}, &InvalidDecisionError{RunID: s.RunID, Code: CodeNoDecision,
			Detail: "the workflow returned no decision; return one of ctx.ScheduleStep, ctx.Sleep, ctx.AwaitSignal, ctx.CreateHook, ctx.StartChild, ctx.Complete, ctx.Fail, ctx.Cancel or ctx.ContinueAsNew"}
	default:
		return v.invalid("unknown decision type %T", d)
	}
}

type validation struct{ s *Snapshot }

func (v validation) invalid(format string, args ...any) (Verdict, error) {
	return Verdict{}, &InvalidDecisionError{RunID: v.s.RunID, Code: CodeInvalidDecision, Detail: fmt.Sprintf(format, args...)}
}

func (v validation) settled(format string, args ...any) (Verdict, error) {
	return Verdict{}, &InvalidDecisionError{RunID: v.s.RunID, Code: CodeAlreadySettled, Detail: fmt.Sprintf(format, args...)}
}

// recorded looks id up and reports whether it is recorded as kind; an ID recorded as another
// kind is a non-determinism error.
func (v validation) recorded(kind, id string) (bool, error) {
	k, ok := v.s.ids[id]
	if !ok {
		return false, nil
	}
	if k != kind {
		return true, mismatch(v.s.RunID, k, id, "kind", plain(k), plain(kind), v.s.recordedSeq(id))
	}
	return true, nil
}

// recordedSeq returns the sequence of the event that recorded id.
func (s *Snapshot) recordedSeq(id string) uint64 {
	switch s.ids[id] {
	case kindStep:
		return s.Steps[id].BatchSeq
	case kindWait:
		return s.Waits[id].Seq
	case kindSignalWait:
		return s.SignalWaits[id].Seq
	case kindHook:
		return s.Hooks[id].Seq
	case kindChild:
		return s.Children[id].BatchSeq
	case kindSideEffect:
		return s.SideEffects[id].Seq
	case kindUpsert:
		return s.Upserts[id].Seq
	}
	return 0
}

// steps validates a ScheduleSteps decision: a re-issued pending batch is recognised by
// pendingSteps, anything else validated by stepsInFull.
func (v validation) steps(d ScheduleSteps) (Verdict, error) {
	if len(d.Steps) == 0 {
		return v.invalid("ScheduleSteps needs at least one step")
	}
	if v, ok := v.pendingSteps(d); ok {
		return v, nil
	}
	return v.stepsInFull(d)
}

// stepsInFull validates a non-empty ScheduleSteps decision member by member: every member's
// fields first, then the identities it shares with history, then each recorded member's fields.
func (v validation) stepsInFull(d ScheduleSteps) (Verdict, error) {
	s := v.s
	specs := make([]event.StepSpec, len(d.Steps))
	ids := make([]string, len(d.Steps))
	var seen idSet
	for i, c := range d.Steps {
		if err := event.ValidateID("step", c.ID); err != nil {
			return v.invalid("%v", err)
		}
		if err := event.ValidateName("step", c.Name); err != nil {
			return v.invalid("step %q: %v", c.ID, err)
		}
		if !seen.add(c.ID) {
			return v.invalid("step ID %q appears twice in one batch; give every step its own ID", c.ID)
		}
		in, err := CanonicalJSON(c.Input)
		if err != nil {
			return v.invalid("step %q input is not valid JSON: %v", c.ID, err)
		}
		retry := c.Retry.Normalize()
		if err := retry.Validate(); err != nil {
			return v.invalid("step %q: %v", c.ID, err)
		}
		timeouts, err := stepTimeouts(c.Timeouts)
		if err != nil {
			return v.invalid("step %q: %v", c.ID, err)
		}
		ids[i] = c.ID
		specs[i] = event.StepSpec{ID: c.ID, Name: c.Name, Input: in, Retry: retry, Timeouts: timeouts}
	}
	var first *Step
	for _, id := range ids {
		ok, err := v.recorded(kindStep, id)
		if err != nil {
			return Verdict{}, err
		}
		if ok && first == nil {
			first = s.Steps[id]
		}
	}
	if first == nil {
		return Verdict{Events: []event.Payload{&event.StepScheduled{Steps: specs}}}, nil
	}
	if err := compareMembers(s.RunID, kindStep, s.batches[first.BatchSeq], first.BatchSeq, ids); err != nil {
		return Verdict{}, err
	}
	for _, spec := range specs {
		st := s.Steps[spec.ID]
		rec := event.StepSpec{ID: st.ID, Name: st.Name, Input: st.Input, Retry: st.Retry, Timeouts: st.Timeouts}
		if err := compareStep(s.RunID, rec, st.BatchSeq, spec); err != nil {
			return Verdict{}, err
		}
	}
	for _, id := range ids {
		if !s.Steps[id].Status.Settled() {
			return Verdict{WaitingOn: fmt.Sprintf("step %q", id)}, nil
		}
	}
	st := s.Steps[ids[0]]
	hint := "read its output with ctx.StepOutput or flow.Output before scheduling it"
	if st.Status != StepCompleted {
		hint = "check ctx.StepError before scheduling it"
	}
	return v.settled("step %q already %s at seq %d, yet the workflow scheduled it again; %s, and give a new step a new ID", st.ID, st.Status, st.SettledSeq, hint)
}

// pendingSteps recognises the common re-issue of a recorded batch that is still pending: d
// lists the members of a recorded batch in their order, each byte for byte as recorded (ID,
// name, input; the retry policy once normalized) and vetted when recorded. Such a decision is
// valid and deterministic, so its verdict is the wait on its first unsettled member, found
// without allocating, canonicalising or hashing anything: the cost is one comparison of each
// field of each member. In every other case (a new batch, any difference, a batch already
// settled) it reports false and stepsInFull validates d, which yields the same verdict for a
// decision this recognises and the precise error otherwise.
func (v validation) pendingSteps(d ScheduleSteps) (Verdict, bool) {
	first, ok := v.s.Steps[d.Steps[0].ID]
	if !ok {
		return Verdict{}, false
	}
	batch := v.s.stepBatches[first.BatchSeq]
	if len(batch) != len(d.Steps) {
		return Verdict{}, false
	}
	var waiting *Step
	for i := range d.Steps {
		c, st := &d.Steps[i], batch[i]
		if !st.vetted || c.ID != st.ID || c.Name != st.Name || !bytes.Equal(c.Input, st.Input) {
			return Verdict{}, false
		}
		if !normalizesTo(&c.Retry, &st.Retry) || !c.Timeouts.Equal(st.Timeouts) {
			return Verdict{}, false
		}
		if waiting == nil && !st.Status.Settled() {
			waiting = st
		}
	}
	if waiting == nil {
		return Verdict{}, false
	}
	return Verdict{WaitingOn: fmt.Sprintf("step %q", waiting.ID)}, true
}

// pendingChildren is pendingSteps for a StartChildren decision: each child's ID, definition
// and input byte for byte as recorded, and its cancellation policy once defaulted.
func (v validation) pendingChildren(d StartChildren) (Verdict, bool) {
	first, ok := v.s.Children[d.Children[0].ID]
	if !ok {
		return Verdict{}, false
	}
	batch := v.s.childBatches[first.BatchSeq]
	if len(batch) != len(d.Children) {
		return Verdict{}, false
	}
	var waiting *Child
	for i := range d.Children {
		c, rec := &d.Children[i], batch[i]
		policy := c.CancelPolicy
		if policy == "" {
			policy = event.CancelPolicyRequest
		}
		if !rec.vetted || c.ID != rec.ID || c.Definition != rec.Definition || !bytes.Equal(c.Input, rec.Input) ||
			policy != rec.CancelPolicy || (c.Retry == nil) != (rec.Retry == nil) || c.Retry != nil && !normalizesTo(c.Retry, rec.Retry) {
			return Verdict{}, false
		}
		if waiting == nil && !rec.Settled {
			waiting = rec
		}
	}
	if waiting == nil {
		return Verdict{}, false
	}
	return Verdict{WaitingOn: fmt.Sprintf("child %q (run %q)", waiting.ID, waiting.CurrentRunID())}, true
}

func (v validation) wait(id string, got *event.WaitScheduled) (Verdict, error) {
	s := v.s
	if err := event.ValidateID("wait", id); err != nil {
		return v.invalid("%v", err)
	}
	ok, err := v.recorded(kindWait, id)
	if err != nil {
		return Verdict{}, err
	}
	if !ok {
		return Verdict{Events: []event.Payload{got}}, nil
	}
	w := s.Waits[id]
	rec := &event.WaitScheduled{WaitID: id, Deadline: w.Deadline, Duration: w.Duration}
	if err := compareWait(s.RunID, rec, w.Seq, got); err != nil {
		return Verdict{}, err
	}
	if w.Fired {
		return v.settled("wait %q already fired at seq %d, yet the workflow scheduled it again; check ctx.Fired(%q) first, and give a new wait a new ID", id, w.FiredSeq, id)
	}
	return Verdict{WaitingOn: fmt.Sprintf("wait %q until %s", id, render(w.Deadline))}, nil
}

func (v validation) signal(d AwaitSignal) (Verdict, error) {
	s := v.s
	if err := event.ValidateID("signal wait", d.WaitID); err != nil {
		return v.invalid("%v", err)
	}
	if err := event.ValidateName("signal", d.Name); err != nil {
		return v.invalid("signal wait %q: %v", d.WaitID, err)
	}
	got := &event.SignalAwaited{WaitID: d.WaitID, Name: d.Name}
	ok, err := v.recorded(kindSignalWait, d.WaitID)
	if err != nil {
		return Verdict{}, err
	}
	if !ok {
		return Verdict{Events: []event.Payload{got}}, nil
	}
	w := s.SignalWaits[d.WaitID]
	if err := compareSignalWait(s.RunID, &event.SignalAwaited{WaitID: w.ID, Name: w.Name}, w.Seq, got); err != nil {
		return Verdict{}, err
	}
	if w.Received() {
		return v.settled("signal wait %q already received signal %q at seq %d, yet the workflow awaited it again; read ctx.Signal(%q) first, and give a new wait a new ID", d.WaitID, d.Name, s.Signals[w.Signal].Seq, d.WaitID)
	}
	return Verdict{WaitingOn: fmt.Sprintf("signal %q (wait %q)", d.Name, d.WaitID)}, nil
}

func (v validation) hook(d CreateHook) (Verdict, error) {
	s := v.s
	if err := event.ValidateID("hook", d.ID); err != nil {
		return v.invalid("%v", err)
	}
	token := d.Token
	if token == "" {
		token = HookToken(s.Seed, s.RunID, d.ID)
		if r, ok := s.ahead.(*event.HookCreated); ok && r.HookID == d.ID && s.Copied(s.Seq+1) {
			// Replaying a reset's copy of the old run's hook: it keeps the token the old run
			// derived (docs/reset.md).
			token = r.Token
		}
	} else if err := event.ValidateRunID(token); err != nil {
		return v.invalid("hook %q token: %v", d.ID, err)
	}
	var meta json.RawMessage
	if len(d.Metadata) > 0 {
		m, err := CanonicalJSON(d.Metadata)
		if err != nil {
			return v.invalid("hook %q metadata is not valid JSON: %v", d.ID, err)
		}
		meta = m
	}
	got := &event.HookCreated{HookID: d.ID, Token: token, Metadata: meta}
	ok, err := v.recorded(kindHook, d.ID)
	if err != nil {
		return Verdict{}, err
	}
	if !ok {
		if owner, used := s.tokens[token]; used {
			return v.invalid("hook %q token is already used by hook %q of this run; give each hook its own token", d.ID, owner)
		}
		return Verdict{Events: []event.Payload{got}}, nil
	}
	h := s.Hooks[d.ID]
	if d.Token == "" && s.Copied(h.Seq) {
		// A reset copied the hook with the token the old run derived from its own run ID: the
		// hook keeps it (docs/reset.md), and a new hook derives one from this run's ID.
		got.Token = h.Token
	}
	if err := compareHook(s.RunID, &event.HookCreated{HookID: h.ID, Token: h.Token, Metadata: h.Metadata}, h.Seq, got); err != nil {
		return Verdict{}, err
	}
	if h.Received {
		return v.settled("hook %q already received its delivery at seq %d, yet the workflow created it again; read ctx.Hook(%q) first, and give a new hook a new ID", d.ID, h.ReceivedSeq, d.ID)
	}
	return Verdict{WaitingOn: fmt.Sprintf("hook %q", d.ID)}, nil
}

// children validates a StartChildren decision, as steps does a ScheduleSteps one.
func (v validation) children(d StartChildren) (Verdict, error) {
	if len(d.Children) == 0 {
		return v.invalid("StartChildren needs at least one child")
	}
	if v, ok := v.pendingChildren(d); ok {
		return v, nil
	}
	return v.childrenInFull(d)
}

// childrenInFull is stepsInFull for a non-empty StartChildren decision.
func (v validation) childrenInFull(d StartChildren) (Verdict, error) {
	s := v.s
	specs := make([]event.ChildSpec, len(d.Children))
	ids := make([]string, len(d.Children))
	var seen idSet
	for i, c := range d.Children {
		if err := event.ValidateID("child", c.ID); err != nil {
			return v.invalid("%v", err)
		}
		if err := event.ValidateName("definition", c.Definition); err != nil {
			return v.invalid("child %q: %v", c.ID, err)
		}
		if !seen.add(c.ID) {
			return v.invalid("child ID %q appears twice in one batch; give every child its own ID", c.ID)
		}
		in, err := CanonicalJSON(c.Input)
		if err != nil {
			return v.invalid("child %q input is not valid JSON: %v", c.ID, err)
		}
		policy := c.CancelPolicy
		if policy == "" {
			policy = event.CancelPolicyRequest
		}
		if !policy.Valid() {
			return v.invalid("child %q cancel policy must be request_cancel or abandon, got %q", c.ID, policy)
		}
		runID := event.ChildRunID(s.RunID, c.ID)
		if err := event.ValidateDerivedRunID(runID); err != nil {
			return v.invalid("child %q: its run ID: %v", c.ID, err)
		}
		var retry *event.RetryPolicy
		if c.Retry != nil {
			r := c.Retry.Normalize()
			if err := r.Validate(); err != nil {
				return v.invalid("child %q: %v", c.ID, err)
			}
			if r.MaxAttempts > 1 {
				if err := event.ValidateDerivedRunID(event.ChildAttemptRunID(runID, r.MaxAttempts)); err != nil {
					return v.invalid("child %q: the run ID of its last attempt: %v", c.ID, err)
				}
			}
			retry = &r
		}
		ids[i] = c.ID
		specs[i] = event.ChildSpec{ChildID: c.ID, RunID: runID, Definition: c.Definition, Input: in, CancelPolicy: policy, Retry: retry}
	}
	var first *Child
	for _, id := range ids {
		ok, err := v.recorded(kindChild, id)
		if err != nil {
			return Verdict{}, err
		}
		if ok && first == nil {
			first = s.Children[id]
		}
	}
	if first == nil {
		return Verdict{Events: []event.Payload{&event.ChildScheduled{Children: specs}}}, nil
	}
	if err := compareMembers(s.RunID, kindChild, s.batches[first.BatchSeq], first.BatchSeq, ids); err != nil {
		return Verdict{}, err
	}
	for _, spec := range specs {
		c := s.Children[spec.ChildID]
		rec := event.ChildSpec{ChildID: c.ID, RunID: c.RunID, Definition: c.Definition, Input: c.Input, CancelPolicy: c.CancelPolicy, Retry: c.Retry}
		if err := compareChild(s.RunID, rec, c.BatchSeq, spec); err != nil {
			return Verdict{}, err
		}
	}
	for _, id := range ids {
		if !s.Children[id].Settled {
			return Verdict{WaitingOn: fmt.Sprintf("child %q (run %q)", id, s.Children[id].CurrentRunID())}, nil
		}
	}
	c := s.Children[ids[0]]
	return v.settled("child %q already %s at seq %d, yet the workflow started it again; read ctx.Child(%q) first, and give a new child a new ID", c.ID, c.Outcome, c.SettledSeq, c.ID)
}

// end returns the events that end the run with terminal: first step.cancelled for every unsettled
// step, then terminal.
func (v validation) end(terminal event.Payload, cause event.Cause, reason string) (Verdict, error) {
	return Verdict{Events: endEvents(v.s, terminal, cause, reason)}, nil
}

func endEvents(s *Snapshot, terminal event.Payload, cause event.Cause, reason string) []event.Payload {
	ids := s.Unsettled()
	if len(ids) == 0 {
		return []event.Payload{terminal}
	}
	steps := make([]event.CancelledStep, len(ids))
	for i, id := range ids {
		st := s.Steps[id]
		// An attempt in flight may have run; one waiting out its backoff has not started.
		steps[i] = event.CancelledStep{StepID: id, Attempt: st.Attempt, SideEffectUnknown: st.Status == StepRunning}
	}
	return []event.Payload{&event.StepCancelled{Steps: steps, Reason: reason, Cause: cause}, terminal}
}

// Stamp completes events that are about to be recorded at time t with what derives from t: the
// deadline of a Sleep's wait.scheduled counts from the event that records it, t plus its
// duration, not from the run's previous event. Replay compares a Sleep by its duration, so the
// deadline recorded once is never recomputed.
func Stamp(events []event.Payload, t time.Time) {
	for _, p := range events {
		if w, ok := p.(*event.WaitScheduled); ok && w.Duration > 0 {
			w.Deadline = t.Add(time.Duration(w.Duration)).UTC()
		}
	}
}

// CanonicalJSON returns raw compacted, with empty input meaning null, or the syntax error.
// Valid JSON that is compact already is returned as it is, not copied: a payload of 100 MiB is
// checked, never copied, on its way into a decision (docs/large-payloads.md).
func CanonicalJSON(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("null"), nil
	}
	if len(raw) >= compactCheckMin && isCompact(raw) && json.Valid(raw) {
		return raw, nil
	}
	var b bytes.Buffer
	b.Grow(len(raw))
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// compactCheckMin is the size from which CanonicalJSON checks whether a document is compact
// already before compacting it: below it a copy costs less than the extra pass.
const compactCheckMin = 4 << 10

// isCompact reports whether raw has no whitespace outside its strings (it may still be
// invalid JSON).
func isCompact(raw []byte) bool {
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		}
	}
	return true
}
