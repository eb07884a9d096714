package api

import "encoding/json"

// Reset and rerun (docs/reset.md), through the ingress:
//
//	NATS  request on flow.ingress.reset.<run>, body ResetRequest: ResetResponse, or an
//	      IngressError with the Nats-Service-Error-Code header like every ingress input
//	HTTP  POST /v1/runs/{run}/reset, body ResetRequest: 200 ResetResponse (a repeat too);
//	      an Idempotency-Key header is the request ID when the body has none
const SubjectResetPrefix = IngressPrefix + "reset."

// ResetSubject is the subject of a reset of run runID.
func ResetSubject(runID string) string { return SubjectResetPrefix + runID }

// ResetRequest asks for a reset or a rerun (engine.ResetParams).
type ResetRequest struct {
	// Mode is seq, step, last_decision or rerun.
	Mode   string          `json:"mode"`
	Seq    uint64          `json:"seq,omitempty"`
	StepID string          `json:"step_id,omitempty"`
	Input  json.RawMessage `json:"input,omitempty"`
	// DropInputs drops the inputs after the point instead of reapplying them.
	DropInputs bool   `json:"drop_inputs,omitempty"`
	Reason     string `json:"reason,omitempty"`
	RequestID  string `json:"request_id,omitempty"`
}

// ResetResponse names the old run, the new run and the point.
type ResetResponse struct {
	RunID    string `json:"run_id"`
	NewRunID string `json:"new_run_id"`
	Point    uint64 `json:"point"`
	Mode     string `json:"mode"`
	// Reapplied counts the inputs after the point reapplied in the new run.
	Reapplied int `json:"reapplied"`
}
