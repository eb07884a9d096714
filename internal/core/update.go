package core

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/flowrun/flow/pkg/event"
)

// Updates: a durable, validated request to a running workflow that returns a result to its
// caller (docs/updates.md). The ingress records update.received (ReceiveUpdate); the run's next
// decision, before the workflow is asked for anything else, records how the workflow's validator
// judged the oldest undecided update (update.accepted or update.rejected, through an
// UpdateDecider) and, when its handler completes it at once, update.completed in the same
// commit; a later decision of the workflow's completes an accepted update (CompleteUpdate). The
// run's pending decision (a step in flight, a wait) is untouched: once no update is undecided,
// the workflow is asked again and re-issues it. The validator judges an update once: replay
// takes the verdict history recorded (decideUpdate).

// UpdateStatus is the state of one update.
type UpdateStatus string

const (
	// UpdateReceived: recorded, not yet judged by the workflow's validator.
	UpdateReceived UpdateStatus = "received"
	// UpdateAccepted: accepted; its result is not recorded yet.
	UpdateAccepted UpdateStatus = "accepted"
	// UpdateRejected: rejected by the validator (Error says why). Settled.
	UpdateRejected UpdateStatus = "rejected"
	// UpdateCompleted: completed with Result, or failed with Error. Settled.
	UpdateCompleted UpdateStatus = "completed"
	// UpdateAborted: its run ended before it settled, and a reset that copied it does not carry
	// it on (ResetFrom.AbortedUpdates). Settled.
	UpdateAborted UpdateStatus = "aborted"
)

// Update is the projection of one update.
type Update struct {
	ID      string          `json:"id"`
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload"`
	// Seq is the sequence of its update.received.
	Seq    uint64       `json:"seq"`
	Status UpdateStatus `json:"status"`
	// DecidedSeq is the sequence of its update.accepted or update.rejected.
	DecidedSeq uint64           `json:"decided_seq,omitempty"`
	Result     json.RawMessage  `json:"result,omitempty"`
	Error      *event.ErrorInfo `json:"error,omitempty"`
	// SettledSeq is the sequence of its update.rejected or update.completed.
	SettledSeq uint64 `json:"settled_seq,omitempty"`
}

// Settled reports whether the update's outcome is recorded: rejected or completed.
func (u *Update) Settled() bool {
	return u.Status == UpdateRejected || u.Status == UpdateCompleted || u.Status == UpdateAborted
}

// Open reports whether the update was accepted and waits for its result.
func (u *Update) Open() bool { return u.Status == UpdateAccepted }

// UpdateDecision is how a workflow's update handler judged one update.
type UpdateDecision struct {
	// Reject, when set, rejects the update with this error; nothing else is recorded.
	Reject *event.ErrorInfo
	// Complete completes the accepted update at once, with Result (JSON) or Error.
	Complete bool
	Result   json.RawMessage
	Error    *event.ErrorInfo
}

// UpdateDecider is implemented by runtimes (a Decider) whose workflows handle updates. A Decider
// that does not implement it rejects every update that history has not judged yet.
type UpdateDecider interface {
	// DecideUpdate runs the handler registered for update u of a run of definition, given the
	// snapshot (which it must not modify) and the run's input. A panic is returned as a
	// *PanicError.
	//
	// With accepted false, no verdict on u is recorded: it runs the validator and, when that
	// accepts, the at-once completion. With accepted true, Replay is re-deriving a commit that
	// recorded u's acceptance: the validator must not run (the recorded verdict stands, whatever
	// the validator would say now) and only the at-once completion is decided; a Reject
	// returned then is ignored. The completion must be a pure function of the snapshot, the
	// input and u, as RunWorkflow is: replay compares it with the recorded update.completed.
	// Replay never calls DecideUpdate for an update whose rejection is recorded.
	DecideUpdate(definition string, input json.RawMessage, history *Snapshot, u *Update, accepted bool) (UpdateDecision, error)
}

// CompleteUpdate is the decision that records the outcome of an accepted update: Result (JSON),
// or Error when it failed.
type CompleteUpdate struct {
	ID     string
	Result json.RawMessage
	Error  *event.ErrorInfo
}

func (CompleteUpdate) decision()          {}
func (d CompleteUpdate) Describe() string { return describe("CompleteUpdate", d.ID) }

// OpenUpdates returns the accepted updates that wait for their result, in the order they were
// received.
func (s *Snapshot) OpenUpdates() []*Update {
	var out []*Update
	for _, u := range s.UpdateList() {
		if u.Open() {
			out = append(out, u)
		}
	}
	return out
}

// UpdateList returns every update of the run in the order they were received. A snapshot
// decoded from JSON (which does not carry the order) is ordered by Seq.
func (s *Snapshot) UpdateList() []*Update {
	out := make([]*Update, 0, len(s.Updates))
	if len(s.updateOrder) == len(s.Updates) {
		for _, id := range s.updateOrder {
			out = append(out, s.Updates[id])
		}
		return out
	}
	for _, u := range s.Updates {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b *Update) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// UndecidedUpdates returns the number of received updates the workflow has not judged yet.
func (s *Snapshot) UndecidedUpdates() int { return len(s.undecided) }

// ReceiveUpdate returns the event that records update updateID, called name, with payload.
// ErrDuplicate if that update ID was recorded with the same name and payload, even if the run
// ended since; ErrDeliveryConflict if it was recorded with another; otherwise ErrTerminal if the
// run ended.
func ReceiveUpdate(s *Snapshot, updateID, name string, payload json.RawMessage) ([]event.Payload, error) {
	if u, ok := s.Updates[updateID]; ok {
		p, err := CanonicalJSON(payload)
		if u.Name != name || err != nil || !bytes.Equal(p, u.Payload) {
			return nil, fmt.Errorf("%w: run %q recorded update %q at seq %d as %q with another payload; send a new update ID for a new update",
				ErrDeliveryConflict, s.RunID, updateID, u.Seq, u.Name)
		}
		return nil, fmt.Errorf("%w: update %q of run %q", ErrDuplicate, updateID, s.RunID)
	}
	if err := live(s); err != nil {
		return nil, err
	}
	if err := event.ValidateName("update", name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if err := event.ValidateUpdateID(updateID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	p, err := CanonicalJSON(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: update %q payload is not valid JSON: %w", ErrInvalidInput, name, err)
	}
	return []event.Payload{&event.UpdateReceived{UpdateID: updateID, Name: name, Payload: p}}, nil
}

// decideUpdate returns the events that judge the oldest undecided update, and true; or false
// when every received update is decided. While Replay re-derives a commit that recorded the
// update's verdict (s.ahead), that verdict is used and the validator does not run: a rejection
// is returned as recorded, an acceptance only asks the handler for its at-once completion. An
// update judged in history is thus never judged again, so a changed validator leaves the runs it
// judged before replayable; only updates without a recorded verdict meet the new validator.
func decideUpdate(s *Snapshot, d Decider) (Verdict, bool, error) {
	if len(s.undecided) == 0 {
		return Verdict{}, false, nil
	}
	u := s.Updates[s.undecided[0]]
	accepted := false
	switch r := s.ahead.(type) {
	case *event.UpdateRejected:
		if r.UpdateID == u.ID {
			rec := *r
			return Verdict{Events: []event.Payload{&rec}}, true, nil
		}
	case *event.UpdateAccepted:
		accepted = r.UpdateID == u.ID
	}
	accept := &event.UpdateAccepted{UpdateID: u.ID}
	ud, ok := d.(UpdateDecider)
	if !ok {
		if accepted {
			return Verdict{Events: []event.Payload{accept}}, true, nil
		}
		reject := &event.UpdateRejected{UpdateID: u.ID, Error: event.ErrorInfo{Kind: UpdateNoHandler,
			Message: fmt.Sprintf("workflow %q registers no update handler for %q", s.Spec.Definition, u.Name)}}
		return Verdict{Events: []event.Payload{reject}}, true, nil
	}
	dec, err := ud.DecideUpdate(s.Spec.Definition, s.Input, s, u, accepted)
	if err != nil {
		return Verdict{}, true, err
	}
	if dec.Reject != nil && !accepted {
		e := *dec.Reject
		if e.Message == "" {
			e.Message = "update rejected"
		}
		return Verdict{Events: []event.Payload{&event.UpdateRejected{UpdateID: u.ID, Error: e}}}, true, nil
	}
	events := []event.Payload{accept}
	if dec.Complete {
		c, err := updateCompletion(s, u.ID, dec.Result, dec.Error)
		if err != nil {
			return Verdict{}, true, err
		}
		events = append(events, c)
	}
	return Verdict{Events: events}, true, nil
}

// UpdateNoHandler is the error kind of the rejection of an update no handler is registered for.
const UpdateNoHandler = "no_update_handler"

func updateCompletion(s *Snapshot, id string, result json.RawMessage, e *event.ErrorInfo) (*event.UpdateCompleted, error) {
	if e != nil {
		errInfo := *e
		if errInfo.Message == "" {
			errInfo.Message = "update failed"
		}
		return &event.UpdateCompleted{UpdateID: id, Error: &errInfo}, nil
	}
	r, err := CanonicalJSON(result)
	if err != nil {
		return nil, &InvalidDecisionError{RunID: s.RunID, Code: CodeInvalidDecision, Detail: fmt.Sprintf("the result of update %q is not valid JSON: %v", id, err)}
	}
	return &event.UpdateCompleted{UpdateID: id, Result: r}, nil
}

// completeUpdate validates a CompleteUpdate decision.
func (v validation) completeUpdate(d CompleteUpdate) (Verdict, error) {
	u, ok := v.s.Updates[d.ID]
	switch {
	case !ok:
		return v.invalid("CompleteUpdate(%q): the run has no such update; complete the IDs ctx.Updates lists", d.ID)
	case u.Status == UpdateCompleted:
		return v.settled("update %q already completed at seq %d, yet the workflow completed it again; check ctx.Update(%q).Open() first", d.ID, u.SettledSeq, d.ID)
	case u.Status == UpdateRejected:
		return v.settled("update %q was rejected at seq %d; a rejected update takes no result", d.ID, u.SettledSeq)
	case u.Status != UpdateAccepted:
		return v.invalid("CompleteUpdate(%q): the update is not accepted yet", d.ID)
	}
	c, err := updateCompletion(v.s, d.ID, d.Result, d.Error)
	if err != nil {
		return Verdict{}, err
	}
	return Verdict{Events: []event.Payload{c}}, nil
}

// checkUpdate validates an update event against the snapshot (the invariants of updates: an
// update ID is received once; it is judged once, after it was received and in the order
// updates were received; only an accepted update completes, once).
func (s *Snapshot) checkUpdate(e event.Envelope) error {
	switch p := e.Payload.(type) {
	case *event.UpdateReceived:
		if u, dup := s.Updates[p.UpdateID]; dup {
			return s.fail(e, "duplicate_delivery", "update %q was already received at seq %d", p.UpdateID, u.Seq)
		}
	case *event.UpdateAccepted:
		return s.checkJudged(e, p.UpdateID)
	case *event.UpdateRejected:
		return s.checkJudged(e, p.UpdateID)
	case *event.UpdateCompleted:
		u, ok := s.Updates[p.UpdateID]
		switch {
		case !ok:
			return s.fail(e, "unknown_id", "update %q was never received", p.UpdateID)
		case u.Status == UpdateCompleted || u.Status == UpdateRejected:
			return s.fail(e, "duplicate_id", "update %q already settled (%s) at seq %d", p.UpdateID, u.Status, u.SettledSeq)
		case u.Status != UpdateAccepted:
			return s.fail(e, "update_state", "update %q completed before it was accepted", p.UpdateID)
		}
	}
	return nil
}

func (s *Snapshot) checkJudged(e event.Envelope, id string) error {
	u, ok := s.Updates[id]
	switch {
	case ok && u.Status == UpdateAborted && s.Copied(e.Seq):
		return nil // the old run judged it; it stays aborted in this reset run
	case !ok:
		return s.fail(e, "unknown_id", "update %q was never received", id)
	case u.Status != UpdateReceived:
		return s.fail(e, "duplicate_id", "update %q was already %s at seq %d", id, u.Status, u.DecidedSeq)
	case s.undecided[0] != id:
		return s.fail(e, "update_order", "%s for update %q while update %q, received earlier, is undecided", e.Type(), id, s.undecided[0])
	}
	return nil
}

// mutateUpdate applies a checked update event.
func (s *Snapshot) mutateUpdate(e event.Envelope) {
	switch p := e.Payload.(type) {
	case *event.UpdateReceived:
		if s.Updates == nil {
			s.Updates = map[string]*Update{}
		}
		u := &Update{ID: p.UpdateID, Name: p.Name, Payload: p.Payload, Seq: e.Seq, Status: UpdateReceived}
		s.Updates[p.UpdateID] = u
		s.updateOrder = append(s.updateOrder, p.UpdateID)
		if s.ResetFrom != nil && slices.Contains(s.ResetFrom.AbortedUpdates, p.UpdateID) {
			u.Status, u.SettledSeq = UpdateAborted, e.Seq
			break
		}
		s.undecided = append(s.undecided, p.UpdateID)
	case *event.UpdateAccepted:
		u := s.Updates[p.UpdateID]
		if u.Status == UpdateAborted {
			break
		}
		u.Status, u.DecidedSeq = UpdateAccepted, e.Seq
		s.undecided = s.undecided[1:]
	case *event.UpdateRejected:
		u := s.Updates[p.UpdateID]
		errInfo := p.Error
		u.Status, u.DecidedSeq, u.SettledSeq, u.Error = UpdateRejected, e.Seq, e.Seq, &errInfo
		s.undecided = s.undecided[1:]
	case *event.UpdateCompleted:
		u := s.Updates[p.UpdateID]
		u.Status, u.SettledSeq, u.Result, u.Error = UpdateCompleted, e.Seq, p.Result, p.Error
	}
}

// compareUpdate compares a recorded update.accepted, update.rejected or update.completed with
// the one replay produced (of the same type): a different update, rejection error or result is a
// non-determinism error of kind "update". A verdict replay re-derives is the recorded one
// (decideUpdate), so only the update ID and an at-once completion can differ there.
func compareUpdate(runID string, rec event.Envelope, got event.Payload) error {
	switch r := rec.Payload.(type) {
	case *event.UpdateAccepted:
		g := got.(*event.UpdateAccepted)
		if r.UpdateID != g.UpdateID {
			return mismatch(runID, kindUpdate, r.UpdateID, "update_id", r.UpdateID, g.UpdateID, rec.Seq)
		}
	case *event.UpdateRejected:
		g := got.(*event.UpdateRejected)
		if r.UpdateID != g.UpdateID {
			return mismatch(runID, kindUpdate, r.UpdateID, "update_id", r.UpdateID, g.UpdateID, rec.Seq)
		}
		if r.Error != g.Error {
			return mismatch(runID, kindUpdate, r.UpdateID, "error", plain(r.Error.Error()), plain(g.Error.Error()), rec.Seq)
		}
	case *event.UpdateCompleted:
		g := got.(*event.UpdateCompleted)
		if r.UpdateID != g.UpdateID {
			return mismatch(runID, kindUpdate, r.UpdateID, "update_id", r.UpdateID, g.UpdateID, rec.Seq)
		}
		if (r.Error == nil) != (g.Error == nil) || r.Error != nil && *r.Error != *g.Error {
			return mismatch(runID, kindUpdate, r.UpdateID, "error", r.Error, g.Error, rec.Seq)
		}
		if !JSONEqual(r.Result, g.Result) {
			return mismatch(runID, kindUpdate, r.UpdateID, "result", r.Result, g.Result, rec.Seq)
		}
	}
	return nil
}

// kindUpdate names updates in non-determinism errors. Update IDs are not decision IDs: they
// have their own namespace, chosen by callers.
const kindUpdate = "update"
