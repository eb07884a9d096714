package api

import (
	"encoding/json"
	"time"

	"github.com/flowrun/flow/internal/schedule"
)

// Schedules (docs/schedules.md) are managed through the ingress, over NATS request/reply and
// HTTP; it forwards every change to the scheduler (owner.go), which alone writes them and fires
// them.
//
// # NATS
//
//	flow.ingress.schedules.create      ScheduleCreateRequest   -> ScheduleDescription
//	flow.ingress.schedules.update      ScheduleCreateRequest   -> ScheduleDescription (its spec, start and policies; the state stays)
//	flow.ingress.schedules.describe    ScheduleRequest         -> ScheduleDescription
//	flow.ingress.schedules.list        ScheduleRequest (empty) -> ScheduleList
//	flow.ingress.schedules.pause       ScheduleRequest (note)  -> ScheduleDescription
//	flow.ingress.schedules.unpause     ScheduleRequest (note)  -> ScheduleDescription
//	flow.ingress.schedules.trigger     ScheduleRequest         -> ScheduleDescription
//	flow.ingress.schedules.backfill    ScheduleRequest         -> ScheduleDescription
//	flow.ingress.schedules.delete      ScheduleRequest         -> ScheduleDescription (as it was)
//
// Bodies are plain JSON; errors are an IngressError with the headers HeaderErrorCode and
// HeaderStatus, as for inputs.
//
// # HTTP
//
//	POST   /v1/schedules                   create: 201
//	GET    /v1/schedules                   list
//	GET    /v1/schedules/{name}?next=N     describe, with the next N action times (default 5)
//	PUT    /v1/schedules/{name}            update
//	DELETE /v1/schedules/{name}            delete
//	POST   /v1/schedules/{name}/pause      pause, with {"note": ...}
//	POST   /v1/schedules/{name}/unpause    unpause, with {"note": ...}
//	POST   /v1/schedules/{name}/trigger    act now: 202
//	POST   /v1/schedules/{name}/backfill   act for the slots of {"start", "end"}: 202
const SubjectSchedulePrefix = IngressPrefix + "schedules."

// Schedule operations: the last token of their NATS subjects.
const (
	ScheduleOpCreate   = "create"
	ScheduleOpUpdate   = "update"
	ScheduleOpDescribe = "describe"
	ScheduleOpList     = "list"
	ScheduleOpPause    = "pause"
	ScheduleOpUnpause  = "unpause"
	ScheduleOpTrigger  = "trigger"
	ScheduleOpBackfill = "backfill"
	ScheduleOpDelete   = "delete"
)

// ScheduleSubject returns the NATS subject of schedule operation op.
func ScheduleSubject(op string) string { return SubjectSchedulePrefix + op }

// Error codes of schedule operations.
const (
	CodeScheduleNotFound IngressCode = "schedule_not_found" // 404
	CodeScheduleExists   IngressCode = "schedule_exists"    // 409
)

// ScheduleCreateRequest creates (or, for update, changes) a schedule. Durations are strings
// such as "15m".
type ScheduleCreateRequest struct {
	Name string        `json:"name"`
	Spec schedule.Spec `json:"spec"`
	// Definition, Queue and Input are the start of each run.
	Definition string          `json:"definition"`
	Queue      string          `json:"queue,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	// Overlap is the overlap policy ("" is skip); CatchupWindow how late a slot may still start
	// after downtime ("" is 1h).
	Overlap       schedule.Overlap `json:"overlap,omitempty"`
	CatchupWindow string           `json:"catchup_window,omitempty"`
	// Paused creates the schedule paused, with Note.
	Paused bool   `json:"paused,omitempty"`
	Note   string `json:"note,omitempty"`
}

// ScheduleRequest names a schedule and carries what its operation needs.
type ScheduleRequest struct {
	Name string `json:"name"`
	// Note is a pause's or unpause's note.
	Note string `json:"note,omitempty"`
	// Overlap overrides the schedule's overlap policy for a trigger or a backfill.
	Overlap schedule.Overlap `json:"overlap,omitempty"`
	// Start and End are a backfill's range, [Start, End).
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	// RequestID makes a trigger or a backfill idempotent: a repeat is taken once. Empty
	// generates one (a retry then acts again).
	RequestID string `json:"request_id,omitempty"`
	// Next is how many next action times a description lists (0: 5, at most 100).
	Next int `json:"next,omitempty"`
}

// ScheduleDescription is a schedule as stored, with its next actions.
type ScheduleDescription struct {
	Schedule schedule.Schedule `json:"schedule"`
	// Next are the next scheduled actions: the slot, its fire time (At, jitter included) and
	// the run ID it will have. Empty while paused.
	Next []schedule.Action `json:"next,omitempty"`
	// Accepted says whether a trigger or a backfill was taken (false for a repeated request
	// ID).
	Accepted bool `json:"accepted,omitempty"`
	// RequestID is the ID of the trigger or backfill taken (the caller's, or generated), and
	// TriggerRunID the run a trigger starts.
	RequestID    string `json:"request_id,omitempty"`
	TriggerRunID string `json:"trigger_run_id,omitempty"`
}

// ScheduleList lists schedules, sorted by name.
type ScheduleList struct {
	Schedules []ScheduleDescription `json:"schedules"`
}

// DefaultScheduleNext is how many next action times a description lists by default.
const DefaultScheduleNext = 5

// MaxScheduleNext bounds them.
const MaxScheduleNext = 100
