package event

import "time"

// ScheduleAction says what made a schedule start a run.
type ScheduleAction string

const (
	// ScheduleScheduled: the schedule's slot came.
	ScheduleScheduled ScheduleAction = "scheduled"
	// ScheduleTrigger: a client asked the schedule to act now (flow schedule trigger).
	ScheduleTrigger ScheduleAction = "trigger"
	// ScheduleBackfill: a client asked the schedule to act for the slots of a past range
	// (flow schedule backfill).
	ScheduleBackfill ScheduleAction = "backfill"
)

// ScheduleRef records, in run.started, the schedule that started the run: its name, the slot
// (the nominal time the run is for, before jitter; for a trigger, when it was asked for) and
// what made it start (docs/schedules.md).
type ScheduleRef struct {
	Name   string         `json:"name"`
	Slot   time.Time      `json:"slot"`
	Action ScheduleAction `json:"action"`
}
