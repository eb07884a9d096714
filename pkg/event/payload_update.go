package event

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The events of updates: a durable, validated request to a running workflow that returns a
// result to its caller. The ingress records update.received; the run's next decision records
// update.accepted or update.rejected (the workflow's validator decides), and update.completed
// follows, in the same commit when the handler completes the update at once, or in a later
// decision of the workflow's (ctx.CompleteUpdate). Acceptance, rejection and completion are
// decision events. Replay takes a recorded acceptance or rejection as it is (the validator
// judges an update once) and derives the completions again, comparing them with the recorded
// ones.

// UpdateReceived records an update sent to the run. UpdateID identifies it within the run: the
// same ID is recorded once.
type UpdateReceived struct {
	// UpdateID identifies the update in the run; Name is its registered name; Payload its data
	// (JSON).
	UpdateID string          `json:"update_id"`
	Name     string          `json:"name"`
	Payload  json.RawMessage `json:"payload"`
	// TraceParent is the W3C traceparent of the span that sent the update, when there was one.
	TraceParent string `json:"traceparent,omitempty"`
}

// UpdateAccepted records that the workflow's validator accepted update UpdateID. Its result
// follows in update.completed.
type UpdateAccepted struct {
	// UpdateID is the update the workflow's validator accepted.
	UpdateID string `json:"update_id"`
}

// UpdateRejected records that the workflow's validator rejected update UpdateID with Error (or
// that the workflow registers no handler for its name). Nothing about the update follows.
type UpdateRejected struct {
	// UpdateID is the update; Error why the validator rejected it.
	UpdateID string    `json:"update_id"`
	Error    ErrorInfo `json:"error"`
}

// UpdateCompleted records the outcome of an accepted update: its Result (absent means null), or
// the Error its handler returned. Nothing about the update follows.
type UpdateCompleted struct {
	// UpdateID is the update; Result its result (JSON), or Error the error its handler returned.
	UpdateID string          `json:"update_id"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    *ErrorInfo      `json:"error,omitempty"`
}

func (*UpdateReceived) EventType() Type  { return TypeUpdateReceived }
func (*UpdateAccepted) EventType() Type  { return TypeUpdateAccepted }
func (*UpdateRejected) EventType() Type  { return TypeUpdateRejected }
func (*UpdateCompleted) EventType() Type { return TypeUpdateCompleted }

func (p *UpdateReceived) PayloadFields() []*json.RawMessage  { return []*json.RawMessage{&p.Payload} }
func (*UpdateAccepted) PayloadFields() []*json.RawMessage    { return nil }
func (*UpdateRejected) PayloadFields() []*json.RawMessage    { return nil }
func (p *UpdateCompleted) PayloadFields() []*json.RawMessage { return []*json.RawMessage{&p.Result} }

func (p *UpdateReceived) Summarize() string {
	return fmt.Sprintf("update %q (%s) received %s", p.Name, p.UpdateID, inline(p.Payload))
}

func (p *UpdateAccepted) Summarize() string { return fmt.Sprintf("update %s accepted", p.UpdateID) }

func (p *UpdateRejected) Summarize() string {
	return fmt.Sprintf("update %s rejected: %s", p.UpdateID, p.Error.Error())
}

func (p *UpdateCompleted) Summarize() string {
	if p.Error != nil {
		return fmt.Sprintf("update %s failed: %s", p.UpdateID, p.Error.Error())
	}
	return fmt.Sprintf("update %s completed → %s", p.UpdateID, inline(p.Result))
}

// Validate implements Payload.
func (p *UpdateReceived) Validate() error {
	return errors.Join(required("update_id", p.UpdateID), required("name", p.Name), requiredJSON("payload", p.Payload))
}

// Validate implements Payload.
func (p *UpdateAccepted) Validate() error { return required("update_id", p.UpdateID) }

// Validate implements Payload.
func (p *UpdateRejected) Validate() error {
	return errors.Join(required("update_id", p.UpdateID), required("error.message", p.Error.Message))
}

// Validate implements Payload.
func (p *UpdateCompleted) Validate() error {
	var both error
	if p.Error != nil && len(p.Result) > 0 {
		both = fieldError("result", "must be absent when error is set")
	}
	var msg error
	if p.Error != nil {
		msg = required("error.message", p.Error.Message)
	}
	return errors.Join(required("update_id", p.UpdateID), optionalJSON("result", p.Result), both, msg)
}

// ValidateUpdateID checks an update ID: 1 to 128 letters, digits, '-' or '_' (an update ID
// appears in URLs and NATS subjects).
func ValidateUpdateID(id string) error {
	return validate("update ID", id, MaxIDLength, false, "(an update ID appears in URLs and NATS subjects)")
}
