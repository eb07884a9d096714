package event

import (
	"fmt"
	"time"
)

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
	// Name is the schedule; Slot the slot of its timetable the run is for; Action how the run came
	// (a scheduled slot, a trigger or a backfill).
	Name   string         `json:"name"`
	Slot   time.Time      `json:"slot"`
	Action ScheduleAction `json:"action"`
}

// summary renders r for run.started's summary: "" for a nil r.
func (r *ScheduleRef) summary() string {
	if r == nil {
		return ""
	}
	return fmt.Sprintf(", by schedule %s for slot %s (%s)", r.Name, r.Slot.Format("2006-01-02 15:04:05"), r.Action)
}
