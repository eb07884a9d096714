package api

import (
	"encoding/json"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// Updates (docs/updates.md).
//
// The ingress records an update (update.received) and answers with an InputResponse whose
// DeliveryID is the update ID:
//
//	NATS flow.ingress.update.<run>.<name>                    data: the payload; CloudEvent id (or Idempotency-Key): the update ID
//	NATS flow.ingress.update_with_start.<definition>.<name>  data: a WithStartRequest
//	NATS flow.ingress.signal_with_start.<definition>.<name>  data: a WithStartRequest
//	HTTP POST /v1/runs/{run}/updates/{name}[?wait=true][&update_id=]            202, or with wait 200 and an UpdateState
//	HTTP POST /v1/workflows/{definition}/update-with-start/{name}[?wait=true]   201 or 202, or with wait 200 and an UpdateState
//	HTTP POST /v1/workflows/{definition}/signal-with-start/{name}               201 or 202
//	HTTP GET  /v1/runs/{run}/updates/{update_id}[?wait=30s]                     200 and an UpdateState
//
// The history service answers where an update stands, waiting for its outcome when asked:
// SubjectUpdate takes an UpdateRequest and answers an UpdateState.

// SubjectUpdate is the history service's endpoint for an update's state (a long poll with
// UpdateRequest.Wait).
const SubjectUpdate = "flow.api.runs.update"

// Subject prefixes of the update doors of the ingress.
const (
	SubjectUpdatePrefix          = IngressPrefix + "update."
	SubjectUpdateWithStartPrefix = IngressPrefix + "update_with_start."
	SubjectSignalWithStartPrefix = IngressPrefix + "signal_with_start."
)

// Input kinds of updates and of the starts that carry an input.
const (
	KindUpdate          InputKind = "update"
	KindUpdateWithStart InputKind = "update_with_start"
	KindSignalWithStart InputKind = "signal_with_start"
)

// UpdateSubject, UpdateWithStartSubject and SignalWithStartSubject name the NATS subjects of the
// update doors.
func UpdateSubject(runID, name string) string { return SubjectUpdatePrefix + runID + "." + name }
func UpdateWithStartSubject(definition, name string) string {
	return SubjectUpdateWithStartPrefix + definition + "." + name
}
func SignalWithStartSubject(definition, name string) string {
	return SubjectSignalWithStartPrefix + definition + "." + name
}

// WithStartRequest is the body of an update-with-start or a signal-with-start: the start, and
// the input the run receives whether this request starts it or it existed.
type WithStartRequest struct {
	// RunID is the run's ID, required: a retry must find the run its first attempt started.
	RunID string `json:"run_id"`
	// Queue is the task queue. Defaults to the ingress's.
	Queue string `json:"queue,omitempty"`
	// Input is the workflow's input; absent means null.
	Input json.RawMessage `json:"input,omitempty"`
	// Payload is the update's or signal's payload; absent means null.
	Payload json.RawMessage `json:"payload,omitempty"`
	// UpdateID (or DeliveryID for a signal) deduplicates the input; empty uses the request's
	// delivery ID (CloudEvent id, Idempotency-Key), else a fresh one.
	UpdateID string `json:"update_id,omitempty"`
	// Attributes are the search attributes the run starts with, as StartRequest.Attributes.
	Attributes map[string]json.RawMessage `json:"attributes,omitempty"`
}

// UpdateRequest asks where update UpdateID of run RunID stands.
type UpdateRequest struct {
	RunID    string `json:"run_id"`
	UpdateID string `json:"update_id"`
	// Wait, when positive, holds the answer until the update settled (rejected or completed) or
	// the run ended, for at most Wait (at most MaxAwait). Zero answers at once.
	Wait time.Duration `json:"wait,omitempty"`
}

// Update states beyond the ones history records: an update whose run ended before it settled
// (aborted), and one whose run a reset ended, which the reset carried on to its new run (moved).
const (
	UpdateAborted                   = core.UpdateAborted
	UpdateMoved   core.UpdateStatus = "moved"
)

// UpdateState is where one update stands.
type UpdateState struct {
	RunID    string `json:"run_id"`
	UpdateID string `json:"update_id"`
	Name     string `json:"name"`
	// Status is received, accepted, rejected, completed, aborted (the run ended before the
	// update settled), or moved (a reset ended the run and carried the update on to MovedTo,
	// which answers it: the history service follows it there when asked to wait).
	Status core.UpdateStatus `json:"status"`
	// MovedTo is the run a reset carried the unsettled update on to (Status moved).
	MovedTo string `json:"moved_to,omitempty"`
	// Settled is set once Status will not change: rejected, completed or aborted.
	Settled bool `json:"settled"`
	// Result is a completed update's result.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is why a rejected update was rejected, why a completed one failed, or how the run of
	// an aborted one ended.
	Error *event.ErrorInfo `json:"error,omitempty"`
	// RunStatus is the run's status.
	RunStatus core.Status `json:"run_status"`
	// Seq is the sequence of the event that last changed the update.
	Seq uint64 `json:"seq"`
	// Blocked is the run's diagnosis when a decision failed after the update was received and
	// the update has not settled: the run is blocked (a panic, a non-determinism error) and the
	// update waits for code that can decide it, or for an operator.
	Blocked *core.Blocked `json:"blocked,omitempty"`
}

// StateOfUpdate returns where update id of the run s projects stands, or false if s has no
// such update.
func StateOfUpdate(s *core.Snapshot, id string) (*UpdateState, bool) {
	u, ok := s.Updates[id]
	if !ok {
		return nil, false
	}
	st := &UpdateState{RunID: s.RunID, UpdateID: id, Name: u.Name, Status: u.Status, Settled: u.Settled(),
		Result: u.Result, Error: u.Error, RunStatus: s.Status, Seq: max(u.Seq, u.DecidedSeq, u.SettledSeq)}
	if !u.Settled() && s.Blocked != nil && s.Blocked.Seq > u.Seq {
		st.Blocked = s.Blocked
	}
	if link, ok := endingReset(s); ok && !u.Settled() && (u.Seq <= link.Point || !link.DropInputs) {
		st.Status, st.MovedTo, st.Seq = UpdateMoved, link.NewRunID, link.Seq
		return st, true
	}
	if u.Status == core.UpdateAborted {
		st.Error = &event.ErrorInfo{Kind: "run_ended", Message: "run " + s.RunID + " is a reset of run " + s.ResetFrom.RunID +
			", which ended before it settled the update: a reset does not carry on an update answered aborted"}
	}
	if !u.Settled() && s.Terminal() {
		st.Status, st.Settled, st.Seq = UpdateAborted, true, s.Outcome.Seq
		st.Error = &event.ErrorInfo{Kind: "run_ended", Message: "run " + s.RunID + " ended (" + string(s.Outcome.Outcome) + ") before judging the update"}
		if u.Status == core.UpdateAccepted {
			st.Error.Message = "run " + s.RunID + " ended (" + string(s.Outcome.Outcome) + ") before completing the accepted update"
		}
		if s.Outcome.Outcome == event.OutcomeContinuedAsNew {
			st.Error.Message += "; it continued as run " + s.Outcome.SuccessorRunID
		}
	}
	return st, true
}

// endingReset returns the reset that ended run s (run.reset recorded while it was active), if
// one did.
func endingReset(s *core.Snapshot) (core.ResetLink, bool) {
	for _, r := range s.Resets {
		if r.Terminated {
			return r, true
		}
	}
	return core.ResetLink{}, false
}
