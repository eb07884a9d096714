package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// Reset and rerun (docs/reset.md). A reset creates a new run whose history begins with a copy of
// an old run's history up to a reset point P: run.started (the old one's, with reset_from and,
// for a rerun with a new input, that input), then the old run's events 2..P unchanged, then the
// inputs the old run recorded after P (signals, hook deliveries, updates), unless they are
// dropped. The old run records run.reset naming the new run, and ends if it was active.
//
// A reset point is a decision boundary: after the old run's events 1..P a decision is due, and
// nothing in 1..P is half of a commit. Precisely, P is a reset point when the event at P is
// run.started, an input (IsInput: a signal, hook delivery, update, fired timer or retry, settled
// child, cancellation request, admission or fired start delay) or a step result (step.completed,
// a final step.failed, step.retry_scheduled), and at P the run has not ended, is not waiting
// out its start delay, has no non-final step.failed without its retry, and has no child running
// (a child run belongs to the old run; the new run could not learn how it ended). A decision's
// events, decision.failed, operator cancellations and terminal events are never reset points.

// ResetRequest asks for a reset of a run, as PlanReset takes it.
type ResetRequest struct {
	Mode event.ResetMode
	// Seq is the point of ResetToSeq; StepID the step of ResetToStep and ResetRerun.
	Seq    uint64
	StepID string
	// Input, when set, replaces the run's input in the new run.started (ResetRerun only).
	Input json.RawMessage
	// DropInputs drops the inputs recorded after the point instead of reapplying them.
	DropInputs bool
	Reason     string
	RequestID  string
}

// ResetPlan is what PlanReset derives: the new run's first commit.
type ResetPlan struct {
	// Point is the reset point, the old run's last copied event.
	Point uint64
	// Started is the new run's run.started, with ResetFrom set (At is left to the writer).
	Started *event.RunStarted
	// Copied are the old run's events 2..Point; Reapplied the inputs after it, as recorded.
	Copied, Reapplied []event.Envelope
}

// Events returns the plan's commit: run.started at started, the copies with their recorded
// times, and the reapplied inputs at now (never before the last copy).
func (p *ResetPlan) Events(started, now time.Time) []event.Event {
	out := make([]event.Event, 0, 1+len(p.Copied)+len(p.Reapplied))
	out = append(out, event.Event{Time: started, Payload: p.Started})
	last := started
	for _, e := range p.Copied {
		out = append(out, event.Event{Time: e.Time, Payload: e.Payload})
		last = e.Time
	}
	if now.Before(last) {
		now = last
	}
	for _, e := range p.Reapplied {
		out = append(out, event.Event{Time: now, Payload: e.Payload})
	}
	return out
}

// ResetPointError reports a reset point that is not one, or a run that has none of the kind
// asked for, with the nearest valid points. It matches ErrInvalidInput.
type ResetPointError struct {
	RunID string
	// Seq is the point asked for (0 when the mode chose it); Why says what is wrong.
	Seq uint64
	Why string
	// Before and After are the nearest reset points below and above Seq (0 for none).
	Before, After uint64
	// Points are every reset point of the run, ascending (at most the first and last 20).
	Points []uint64
}

func (e *ResetPointError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "flow: invalid input: run %q: ", e.RunID)
	if e.Seq > 0 {
		fmt.Fprintf(&b, "seq %d is not a reset point: ", e.Seq)
	}
	b.WriteString(e.Why)
	var near []string
	if e.Before > 0 {
		near = append(near, fmt.Sprintf("%d (before)", e.Before))
	}
	if e.After > 0 {
		near = append(near, fmt.Sprintf("%d (after)", e.After))
	}
	if len(near) > 0 {
		fmt.Fprintf(&b, "; nearest reset points: %s", strings.Join(near, ", "))
	}
	if len(e.Points) > 0 {
		fmt.Fprintf(&b, "; reset points: %s", joinSeqs(e.Points))
	} else {
		b.WriteString("; the run has no reset point")
	}
	return b.String()
}

// Is matches ErrInvalidInput.
func (e *ResetPointError) Is(target error) bool { return target == ErrInvalidInput }

func joinSeqs(seqs []uint64) string {
	const show = 20
	parts := make([]string, 0, min(len(seqs), 2*show+1))
	for i, s := range seqs {
		if len(seqs) > 2*show && i == show {
			parts = append(parts, fmt.Sprintf("... (%d more)", len(seqs)-2*show))
		}
		if len(seqs) > 2*show && i >= show && i < len(seqs)-show {
			continue
		}
		parts = append(parts, fmt.Sprint(s))
	}
	return strings.Join(parts, " ")
}

// resetPointWhy says why the event e, just applied to s, does not end a reset point, or "".
func resetPointWhy(s *Snapshot, e event.Envelope) string {
	switch p := e.Payload.(type) {
	case *event.RunStarted, *event.StepCompleted, *event.StepRetryScheduled:
	case *event.StepFailed:
		if !p.Final {
			return "it is a step failure whose retry (step.retry_scheduled) belongs to the same commit"
		}
	case *event.DecisionFailed:
		return "it is a decision.failed: reset to the point before it"
	case *event.RunReset:
		return "it is a run.reset, recorded after the run ended"
	default:
		if e.Type().Terminal() {
			return fmt.Sprintf("it is the run's terminal event (%s)", e.Type())
		}
		if isDecisionEvent(e.Payload) {
			return fmt.Sprintf("it is an event of a decision (%s): a reset point is where a decision is due next", e.Type())
		}
		if !IsInput(e.Payload) {
			return fmt.Sprintf("%s is neither an input nor a step result: a reset point is where a decision is due next", e.Type())
		}
	}
	switch {
	case s.Outcome != nil:
		return "the run has ended there"
	case s.Delayed:
		return "the run is still waiting out its start delay there"
	case s.expectRetry != "":
		return fmt.Sprintf("step %q failed there and its retry belongs to the same commit", s.expectRetry)
	case s.Progress.ChildrenPending > 0:
		var ids []string
		for id, c := range s.Children {
			if !c.Settled {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		return fmt.Sprintf("child run(s) %s are running there: they belong to the old run; reset before they were scheduled or after they settled", strings.Join(ids, ", "))
	}
	return ""
}

// ResetPoints returns the reset points of history, a complete history of one run, ascending.
func ResetPoints(runID string, history []event.Envelope) ([]uint64, error) {
	var points []uint64
	s := newSized(runID, 0)
	for _, e := range history {
		if err := s.Apply(e); err != nil {
			return nil, err
		}
		if resetPointWhy(s, e) == "" {
			points = append(points, e.Seq)
		}
	}
	return points, nil
}

// PlanReset derives the reset req asks for of the run whose complete history is history: the
// point, and the new run's first commit. Errors wrap ErrInvalidInput (a *ResetPointError for a
// point that is not one) or ErrInvalidHistory.
func PlanReset(runID string, history []event.Envelope, req ResetRequest) (*ResetPlan, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: run %q: %s", ErrInvalidInput, runID, fmt.Sprintf(format, args...))
	}
	if !req.Mode.Valid() {
		return nil, bad("reset mode %q is not one of seq, step, last_decision, rerun", req.Mode)
	}
	if len(req.Input) > 0 && req.Mode != event.ResetRerun {
		return nil, bad("only a rerun replaces the input; a %s reset keeps the old run's", req.Mode)
	}
	if len(history) == 0 {
		return nil, fmt.Errorf("%w: run %q", ErrNotFound, runID)
	}
	started, ok := history[0].Payload.(*event.RunStarted)
	if !ok {
		return nil, fmt.Errorf("%w: run %q does not begin with run.started", ErrInvalidHistory, runID)
	}
	switch {
	case started.Parent != nil:
		return nil, bad("it is a child of run %q: reset the parent, or a point of the parent before the child was scheduled", started.Parent.RunID)
	}
	// One pass: every point, the snapshot at each, and where the modes' anchors are.
	s := newSized(runID, 0)
	var points []uint64
	whys := make(map[uint64]string)
	var stepSeq, lastDecision uint64
	for _, e := range history {
		if err := s.Apply(e); err != nil {
			return nil, err
		}
		if why := resetPointWhy(s, e); why == "" {
			points = append(points, e.Seq)
		} else {
			whys[e.Seq] = why
		}
		if isDecisionEvent(e.Payload) {
			lastDecision = e.Seq
		}
		if st, ok := e.Payload.(*event.StepScheduled); ok && stepSeq == 0 && req.StepID != "" {
			for _, m := range st.Steps {
				if m.ID == req.StepID {
					stepSeq = e.Seq
				}
			}
		}
	}
	if s.Outcome != nil && s.Outcome.Outcome == event.OutcomeContinuedAsNew {
		return nil, bad("it continued as new as run %q: reset the run it continued as (or a point of it)", s.Outcome.SuccessorRunID)
	}
	pointErr := func(seq uint64, why string) error {
		pe := &ResetPointError{RunID: runID, Seq: seq, Why: why, Points: points}
		for _, p := range points {
			if p < seq {
				pe.Before = p
			} else if p > seq && pe.After == 0 {
				pe.After = p
			}
		}
		return pe
	}
	// before returns the last point before seq.
	before := func(seq uint64, what string) (uint64, error) {
		i, _ := slices.BinarySearch(points, seq)
		if i == 0 {
			return 0, pointErr(0, "no reset point precedes "+what)
		}
		return points[i-1], nil
	}
	var point uint64
	var err error
	switch req.Mode {
	case event.ResetToSeq:
		switch {
		case req.Seq == 0:
			return nil, pointErr(0, "give the sequence of the point (--to SEQ)")
		case req.Seq > s.Seq:
			return nil, pointErr(req.Seq, fmt.Sprintf("the run has %d events", s.Seq))
		case whys[req.Seq] != "":
			return nil, pointErr(req.Seq, whys[req.Seq])
		}
		point = req.Seq
	case event.ResetToStep, event.ResetRerun:
		if req.StepID == "" {
			return nil, bad("give the step to run again (--to-step ID, --from-step ID)")
		}
		if stepSeq == 0 {
			return nil, bad("no step %q was scheduled", req.StepID)
		}
		point, err = before(stepSeq, fmt.Sprintf("the decision that scheduled step %q (seq %d)", req.StepID, stepSeq))
	case event.ResetToLastDecision:
		if lastDecision == 0 {
			return nil, pointErr(0, "the run has made no decision yet")
		}
		point, err = before(lastDecision, fmt.Sprintf("its last decision (%s at seq %d)", history[lastDecision-1].Type(), lastDecision))
	}
	if err != nil {
		return nil, err
	}
	if req.Mode != event.ResetToStep && req.Mode != event.ResetRerun {
		req.StepID = ""
	}

	ns := *started
	seedRun := runID
	if started.ResetFrom != nil {
		seedRun = started.ResetFrom.SeedRunID
	}
	ns.StartPolicy = nil // the new run was started by a reset, not by a start policy
	ns.ResetFrom = &event.ResetFrom{RunID: runID, Seq: point, Mode: req.Mode, StepID: req.StepID, Reason: req.Reason,
		RequestID: req.RequestID, DropInputs: req.DropInputs, CopiedTo: s.Seq, SeedRunID: seedRun}
	if len(req.Input) > 0 {
		in, err := CanonicalJSON(req.Input)
		if err != nil {
			return nil, bad("the rerun's input is not valid JSON: %v", err)
		}
		ns.Input, ns.ResetFrom.InputReplaced = in, true
	}
	plan := &ResetPlan{Point: point, Started: &ns, Copied: history[1:point]}
	if !req.DropInputs {
		plan.Reapplied = ReapplicableInputs(history, point, s.Seq)
	}
	ns.ResetFrom.Reapplied = len(plan.Reapplied)
	return plan, nil
}

// ReapplicableInputs returns the inputs of history (a run's, from seq 1) after point up to and
// including to that a reset to point reapplies in the new run: every signal.received and
// update.received, and each hook.received whose hook was created at or before point (a hook
// created after it does not exist in the new run until its code creates it again, with a token
// of its own: that delivery is not reapplied).
func ReapplicableInputs(history []event.Envelope, point, to uint64) []event.Envelope {
	hooks := map[string]bool{}
	var out []event.Envelope
	for _, e := range history {
		if e.Seq > to {
			break
		}
		if h, ok := e.Payload.(*event.HookCreated); ok && e.Seq <= point {
			hooks[h.HookID] = true
		}
		if e.Seq <= point {
			continue
		}
		switch p := e.Payload.(type) {
		case *event.SignalReceived, *event.UpdateReceived:
			out = append(out, e)
		case *event.HookReceived:
			if hooks[p.HookID] {
				out = append(out, e)
			}
		}
	}
	return out
}

// SeedRunID returns the run identity ctx.Random and ctx.UUID derive their values from: the run's
// own ID, or, for a reset, the identity of the run it was reset from, so that the copied
// decisions replay with the values they were made with.
func (s *Snapshot) SeedRunID() string {
	if s.ResetFrom != nil && s.ResetFrom.SeedRunID != "" {
		return s.ResetFrom.SeedRunID
	}
	return s.RunID
}

// Copied reports whether the event at seq is a copy of the old run's (a reset run's events
// 2..ResetFrom.Seq are).
func (s *Snapshot) Copied(seq uint64) bool {
	return s.ResetFrom != nil && seq >= 2 && seq <= s.ResetFrom.Seq
}

// ResetOf returns the run.reset of this run that created newRunID, if any.
func (s *Snapshot) ResetOf(newRunID string) (ResetLink, bool) {
	for _, r := range s.Resets {
		if r.NewRunID == newRunID {
			return r, true
		}
	}
	return ResetLink{}, false
}

// RecordReset returns the events that record, in run s (the old run), the reset that created
// the run whose run.started recorded from: run.reset, and, if s is active, its termination
// (step.cancelled for unsettled steps, then run.failed with cause operator) in the same commit.
// It returns an error wrapping ErrDuplicate if s already records that reset.
func RecordReset(s *Snapshot, newRunID string, from *event.ResetFrom) ([]event.Payload, error) {
	if s.Seq == 0 {
		return nil, fmt.Errorf("%w: run %q has not started", ErrNotFound, s.RunID)
	}
	if _, ok := s.ResetOf(newRunID); ok {
		return nil, ErrDuplicate
	}
	r := &event.RunReset{NewRunID: newRunID, Seq: from.Seq, Mode: from.Mode, StepID: from.StepID, Reason: from.Reason,
		RequestID: from.RequestID, DropInputs: from.DropInputs, Terminated: !s.Terminal()}
	if s.Terminal() {
		return []event.Payload{r}, nil
	}
	reason := fmt.Sprintf("reset: run %q continues from seq %d (%s)", newRunID, from.Seq, from.Mode)
	if from.Reason != "" {
		reason += ": " + from.Reason
	}
	end, err := Terminate(s, reason)
	if err != nil {
		return nil, err
	}
	return append([]event.Payload{r}, end...), nil
}

// checkReset validates a run.reset, the one event that may follow the terminal event.
func (s *Snapshot) checkReset(e event.Envelope) error {
	r := e.Payload.(*event.RunReset)
	switch {
	case s.Seq == 0:
		return s.fail(e, "first_event", "the first event must be run.started, got %s", e.Type())
	case s.resetEnding:
		return s.fail(e, "reset_order", "run.reset while the termination of the previous run.reset is due")
	case r.Seq > s.Seq:
		return s.fail(e, "reset_point", "run.reset names point %d, after the run's last event %d", r.Seq, s.Seq)
	case r.Terminated == s.Terminal():
		if r.Terminated {
			return s.fail(e, "reset_order", "run.reset says it ended the run, but the run had ended at seq %d", s.Outcome.Seq)
		}
		return s.fail(e, "reset_order", "run.reset of an active run must end it (terminated) in the same commit")
	}
	if _, dup := s.ResetOf(r.NewRunID); dup {
		return s.fail(e, "duplicate_id", "run.reset names run %q again", r.NewRunID)
	}
	return nil
}

// checkResetEnding validates an event that follows a run.reset that ends the run: only the
// termination (step.cancelled and run.failed with cause operator) may.
func (s *Snapshot) checkResetEnding(e event.Envelope) error {
	switch p := e.Payload.(type) {
	case *event.StepCancelled:
		if p.Cause == event.CauseOperator {
			return nil
		}
	case *event.RunFailed:
		if p.Cause == event.CauseOperator {
			return nil
		}
	}
	return s.fail(e, "reset_order", "%s after a run.reset that ends the run: only its termination (step.cancelled, run.failed with cause operator) may follow", e.Type())
}

func (s *Snapshot) mutateReset(e event.Envelope, r *event.RunReset) {
	s.Resets = append(s.Resets, ResetLink{NewRunID: r.NewRunID, Point: r.Seq, Mode: r.Mode, StepID: r.StepID, Reason: r.Reason,
		DropInputs: r.DropInputs, Terminated: r.Terminated, Seq: e.Seq})
	s.resetEnding = r.Terminated
}

// CheckReset verifies what links a reset's two runs, given both complete histories: the new
// run's run.started records the old run in reset_from; its events 2..point are the old run's,
// type, time and payload; the events that follow up to the count reset_from records are the
// inputs the old run recorded after the point, in order, with their delivery and update IDs (or
// none, with drop_inputs); and the old run records run.reset naming the new run with the same
// point and mode. Each run's own invariants are Check's. It returns the violations found.
func CheckReset(oldRun string, old []event.Envelope, newRun string, nw []event.Envelope) []Violation {
	var vs []Violation
	add := func(seq uint64, rule, format string, args ...any) {
		vs = append(vs, Violation{Seq: seq, Rule: rule, Detail: fmt.Sprintf(format, args...)})
	}
	if len(nw) == 0 || len(old) == 0 {
		add(0, "reset_link", "a history is empty")
		return vs
	}
	st, ok := nw[0].Payload.(*event.RunStarted)
	if !ok || st.ResetFrom == nil {
		add(1, "reset_link", "run %q does not begin with a run.started that records reset_from", newRun)
		return vs
	}
	rf := st.ResetFrom
	if rf.RunID != oldRun {
		add(1, "reset_link", "reset_from names run %q, not %q", rf.RunID, oldRun)
	}
	ost, _ := old[0].Payload.(*event.RunStarted)
	if ost != nil {
		if st.Seed != ost.Seed || st.Spec.Definition != ost.Spec.Definition || st.Spec.BuildID != ost.Spec.BuildID || !slices.Equal(st.Spec.Patches, ost.Spec.Patches) {
			add(1, "reset_link", "the new run's seed or spec differs from the old run's")
		}
		if !rf.InputReplaced && !JSONEqual(st.Input, ost.Input) {
			add(1, "reset_link", "the new run's input differs from the old run's, but reset_from does not say it was replaced")
		}
		if !nw[0].Time.Equal(old[0].Time) {
			add(1, "reset_copy", "run.started's time %s is not the old run's %s", nw[0].Time, old[0].Time)
		}
	}
	if rf.Seq > uint64(len(old)) || rf.CopiedTo > uint64(len(old)) {
		add(1, "reset_link", "reset_from names point %d (copied to %d), but the old run has %d events", rf.Seq, rf.CopiedTo, len(old))
		return vs
	}
	if points, err := ResetPoints(oldRun, old[:rf.CopiedTo]); err == nil && !slices.Contains(points, rf.Seq) {
		add(1, "reset_point", "seq %d of run %q is not a reset point", rf.Seq, oldRun)
	}
	for i := uint64(2); i <= rf.Seq; i++ {
		if i > uint64(len(nw)) {
			add(i, "reset_copy", "the new run ends before the copy of the old run's event %d", i)
			return vs
		}
		if why := sameEvent(old[i-1], nw[i-1]); why != "" {
			add(i, "reset_copy", "the copy of the old run's event %d differs: %s", i, why)
		}
	}
	want := []event.Envelope(nil)
	if !rf.DropInputs {
		want = ReapplicableInputs(old, rf.Seq, rf.CopiedTo)
	}
	if len(want) != rf.Reapplied {
		add(1, "reset_inputs", "reset_from counts %d reapplied inputs, the old run has %d to reapply", rf.Reapplied, len(want))
	}
	for i, w := range want {
		seq := rf.Seq + 1 + uint64(i)
		if seq > uint64(len(nw)) {
			add(seq, "reset_inputs", "the new run ends before reapplied input %d", i+1)
			break
		}
		got := nw[seq-1]
		wb, _ := json.Marshal(w.Payload)
		gb, _ := json.Marshal(got.Payload)
		if w.Type() != got.Type() || !JSONEqual(wb, gb) {
			add(seq, "reset_inputs", "reapplied input %d is %s, the old run recorded %s at seq %d", i+1, got.Type(), w.Type(), w.Seq)
		}
	}
	var link *event.RunReset
	for _, e := range old {
		if r, ok := e.Payload.(*event.RunReset); ok && r.NewRunID == newRun {
			link = r
		}
	}
	switch {
	case link == nil:
		add(uint64(len(old)), "reset_link", "the old run records no run.reset naming run %q", newRun)
	case link.Seq != rf.Seq || link.Mode != rf.Mode || link.DropInputs != rf.DropInputs:
		add(uint64(len(old)), "reset_link", "run.reset names point %d mode %s, reset_from point %d mode %s", link.Seq, link.Mode, rf.Seq, rf.Mode)
	}
	return vs
}

// sameEvent says how two envelopes of different runs differ in type, time or payload, or "".
func sameEvent(a, b event.Envelope) string {
	if a.Type() != b.Type() {
		return fmt.Sprintf("type %s, copied as %s", a.Type(), b.Type())
	}
	if !a.Time.Equal(b.Time) {
		return fmt.Sprintf("time %s, copied as %s", a.Time, b.Time)
	}
	ab, err1 := json.Marshal(a.Payload)
	bb, err2 := json.Marshal(b.Payload)
	if err := errors.Join(err1, err2); err != nil {
		return err.Error()
	}
	if !JSONEqual(ab, bb) {
		return fmt.Sprintf("payload %s, copied as %s", ab, bb)
	}
	return ""
}
