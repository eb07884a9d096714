package core

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/flowrun/flow/pkg/event"
)

// Replay verifies that the code behind d, given each prefix of history after which a decision
// was recorded, makes that same decision again: the events Decide returns for the prefix must
// equal the recorded ones field by field. It returns the snapshot of the whole history, or the
// first *NonDeterminismError, other Decide error, or *HistoryError.
//
// Workers replay a run they load without a cached snapshot, so that code that would have decided
// differently blocks the run instead of extending a history it cannot explain. Replay tests
// (flowtest.Replay) run it over stored histories against new code.
func Replay(runID string, history []event.Envelope, d Decider, opts DecideOptions) (*Snapshot, error) {
	return replayFrom(newSized(runID, len(history)/2), runID, history, d, opts)
}

// ReplayFrom is Replay from snapshot s (a checkpoint) on: it verifies the decisions recorded in
// history, the events after s, and applies them to s. The decisions s covers are not verified
// again. On an error s is left partly applied.
func ReplayFrom(s *Snapshot, history []event.Envelope, d Decider, opts DecideOptions) (*Snapshot, error) {
	return replayFrom(s, s.RunID, history, d, opts)
}

func replayFrom(s *Snapshot, runID string, history []event.Envelope, d Decider, opts DecideOptions) (*Snapshot, error) {
	for i := 0; i < len(history); {
		e := history[i]
		if s.Seq == 0 || s.Terminal() || !isDecisionEvent(e.Payload) {
			if err := s.Apply(e); err != nil {
				return nil, err
			}
			i++
			continue
		}
		s.ahead = e.Payload
		v, err := Decide(s, d, opts)
		s.ahead = nil
		if err != nil {
			return nil, err
		}
		if v.Waiting() {
			return nil, &NonDeterminismError{RunID: runID, Kind: "decision", Field: "decision",
				Recorded: string(describeEvent(e.Payload)), New: "no new decision (still waiting on " + v.WaitingOn + ")", Seq: e.Seq}
		}
		for j, got := range v.Events {
			if i+j >= len(history) {
				return nil, &NonDeterminismError{RunID: runID, Kind: "decision", Field: "decision",
					Recorded: "end of history", New: string(describeEvent(got)), Seq: s.Seq + uint64(j) + 1}
			}
			if err := compareRecorded(runID, history[i+j], got); err != nil {
				return nil, err
			}
		}
		for _, e := range history[i : i+len(v.Events)] {
			if err := s.Apply(e); err != nil {
				return nil, err
			}
		}
		i += len(v.Events)
	}
	return s, nil
}

// compareRecorded compares the recorded event rec with the event got that replay produced.
// Its switch, and describeEvent's, cover the decision events only, and say how each is
// compared (by ID first, member by member) and named in a non-determinism error: the core's
// rules of determinism, not a second list of the catalogue's payload fields or summaries.
func compareRecorded(runID string, rec event.Envelope, got event.Payload) error {
	decisionMismatch := func() error {
		return &NonDeterminismError{RunID: runID, Kind: "decision", Field: "decision",
			Recorded: string(describeEvent(rec.Payload)), New: string(describeEvent(got)), Seq: rec.Seq}
	}
	if rk, rid, rp, ok := cancelIdentity(rec.Payload); ok {
		if gk, gid, gp, ok := cancelIdentity(got); ok && gk == rk {
			switch {
			case rid != gid:
				return mismatch(runID, rk, rid, rk+"_id", rid, gid, rec.Seq)
			case rp != gp:
				return mismatch(runID, rk, rid, "cancel_policy", rp, gp, rec.Seq)
			}
			return nil
		}
	}
	if rec.Type() != got.EventType() {
		return decisionMismatch()
	}
	switch r := rec.Payload.(type) {
	case *event.StepScheduled:
		return compareBatch(runID, kindStep, "step_id", rec.Seq, r.Steps, got.(*event.StepScheduled).Steps,
			stepID, compareStep)
	case *event.ChildScheduled:
		return compareBatch(runID, kindChild, "child_id", rec.Seq, r.Children, got.(*event.ChildScheduled).Children,
			childID, compareChild)
	case *event.WaitScheduled:
		return compareKeyed(runID, kindWait, "wait_id", rec.Seq, r, got.(*event.WaitScheduled),
			func(w *event.WaitScheduled) string { return w.WaitID }, compareWait)
	case *event.SignalAwaited:
		return compareKeyed(runID, kindSignalWait, "wait_id", rec.Seq, r, got.(*event.SignalAwaited),
			func(w *event.SignalAwaited) string { return w.WaitID }, compareSignalWait)
	case *event.HookCreated:
		return compareKeyed(runID, kindHook, "hook_id", rec.Seq, r, got.(*event.HookCreated),
			func(h *event.HookCreated) string { return h.HookID }, compareHook)
	case *event.SideEffectRecorded:
		return compareSideEffect(runID, r, rec.Seq, got.(*event.SideEffectRecorded))
	case *event.AttributesUpserted:
		return compareKeyed(runID, kindUpsert, "upsert_id", rec.Seq, r, got.(*event.AttributesUpserted),
			func(u *event.AttributesUpserted) string { return u.UpsertID }, compareUpsert)
	case *event.RunContinuedAsNew:
		g := got.(*event.RunContinuedAsNew)
		if !JSONEqual(r.Input, g.Input) {
			return mismatch(runID, "continue_as_new", "", "input", r.Input, g.Input, rec.Seq)
		}
		if r.SuccessorRunID != g.SuccessorRunID {
			return mismatch(runID, "continue_as_new", "", "successor_run_id", r.SuccessorRunID, g.SuccessorRunID, rec.Seq)
		}
		return nil
	case *event.UpdateRejected, *event.UpdateAccepted, *event.UpdateCompleted:
		return compareUpdate(runID, rec, got)
	case *event.RunCompleted:
		g := got.(*event.RunCompleted)
		if !JSONEqual(r.Output, g.Output) {
			return mismatch(runID, "run", "", "output", r.Output, g.Output, rec.Seq)
		}
		return nil
	}
	a, _ := json.Marshal(rec.Payload)
	b, _ := json.Marshal(got)
	if !JSONEqual(a, b) {
		return mismatch(runID, "decision", "", "event", json.RawMessage(a), json.RawMessage(b), rec.Seq)
	}
	return nil
}

func stepID(s event.StepSpec) string   { return s.ID }
func childID(c event.ChildSpec) string { return c.ChildID }

func stepIDs(steps []event.StepSpec) []string      { return idsOf(steps, stepID) }
func childIDs(children []event.ChildSpec) []string { return idsOf(children, childID) }

// idsOf returns the ID of each of xs, as id reads it, in order.
func idsOf[T any](xs []T, id func(T) string) []string {
	ids := make([]string, len(xs))
	for i, x := range xs {
		ids[i] = id(x)
	}
	return ids
}

// describeEvent renders a decision event the way workflow code would have asked for it.
func describeEvent(p event.Payload) plain {
	switch p := p.(type) {
	case *event.StepScheduled:
		return plain(fmt.Sprintf("%s(%s)", p.EventType(), strings.Join(stepIDs(p.Steps), ", ")))
	case *event.ChildScheduled:
		return plain(fmt.Sprintf("%s(%s)", p.EventType(), strings.Join(childIDs(p.Children), ", ")))
	case *event.WaitScheduled:
		return plain(fmt.Sprintf("%s(%s)", p.EventType(), p.WaitID))
	case *event.SignalAwaited:
		return plain(fmt.Sprintf("%s(%s, %s)", p.EventType(), p.WaitID, p.Name))
	case *event.HookCreated:
		return plain(fmt.Sprintf("%s(%s)", p.EventType(), p.HookID))
	case *event.SideEffectRecorded:
		return describeSideEffect(p)
	case *event.AttributesUpserted:
		return plain(fmt.Sprintf("%s(%s)", p.EventType(), p.UpsertID))
	case *event.UpdateAccepted:
		return plain(fmt.Sprintf("%s(%s)", p.EventType(), p.UpdateID))
	case *event.UpdateRejected:
		return plain(fmt.Sprintf("%s(%s)", p.EventType(), p.UpdateID))
	case *event.UpdateCompleted:
		return plain(fmt.Sprintf("%s(%s)", p.EventType(), p.UpdateID))
	}
	if _, id, policy, ok := cancelIdentity(p); ok {
		return plain(fmt.Sprintf("%s(%s, %s)", p.EventType(), id, policy))
	}
	return plain(p.EventType())
}
