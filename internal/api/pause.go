package api

import "time"

// Pausing runs, definitions and queues through the ingress (docs/pause.md).
//
// # NATS
//
//	flow.ingress.pause.<run>                       pause a run (body PauseRequest; CloudEvent or plain, as a cancel)
//	flow.ingress.unpause.<run>                     unpause a run
//	flow.ingress.pauses.pause.<scope>.<name>       pause a definition or queue (scope "definition" or "queue"; plain JSON PauseRequest)
//	flow.ingress.pauses.unpause.<scope>.<name>     unpause it
//	flow.ingress.pauses.list                       list the paused definitions and queues
//
// The run doors answer an InputResponse, the scope doors a PausesResponse; errors are an
// IngressError as for every input.
//
// # HTTP
//
//	POST /v1/runs/{run}/pause                      202
//	POST /v1/runs/{run}/unpause                    202
//	POST /v1/definitions/{name}/pause              200, a PausesResponse
//	POST /v1/definitions/{name}/unpause            200
//	POST /v1/queues/{name}/pause                   200
//	POST /v1/queues/{name}/unpause                 200
//	GET  /v1/pauses                                200
const (
	SubjectPausePrefix   = IngressPrefix + "pause."
	SubjectUnpausePrefix = IngressPrefix + "unpause."
	SubjectPausesPrefix  = IngressPrefix + "pauses."
	SubjectPausesList    = SubjectPausesPrefix + "list"
)

// Input kinds of the run doors.
const (
	KindPause   InputKind = "pause"
	KindUnpause InputKind = "unpause"
)

// PauseSubject and UnpauseSubject name the NATS subjects of a run's pause and unpause.
func PauseSubject(runID string) string   { return SubjectPausePrefix + runID }
func UnpauseSubject(runID string) string { return SubjectUnpausePrefix + runID }

// PauseScopeSubject names the subject that pauses (op "pause") or unpauses (op "unpause") the
// definition or queue name (scope "definition" or "queue").
func PauseScopeSubject(op, scope, name string) string {
	return SubjectPausesPrefix + op + "." + scope + "." + name
}

// PauseRequest is the body of a pause or unpause, of a run or of a definition or queue.
type PauseRequest struct {
	// Reason says why (a definition's or queue's note). May be empty.
	Reason string `json:"reason,omitempty"`
	// By names who asks (an operator, a batch job). May be empty.
	By string `json:"by,omitempty"`
}

// ScopePause is a paused definition or queue.
type ScopePause struct {
	Scope string    `json:"scope"`
	Name  string    `json:"name"`
	Note  string    `json:"note,omitempty"`
	By    string    `json:"by,omitempty"`
	At    time.Time `json:"at"`
}

// PausesResponse answers the scope doors: the pauses that exist after the request (for a pause
// or unpause, the one it made or ended), and whether an unpause found a pause to end.
type PausesResponse struct {
	Pauses []ScopePause `json:"pauses"`
	// Found is set by an unpause that ended a pause; clear when there was none.
	Found bool `json:"found,omitempty"`
}
