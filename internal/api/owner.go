package api

import (
	"github.com/flowrun/flow/internal/schedule"
)

// The scheduler's doors: FLOW_SCHEDULES and FLOW_BATCHES have one writer each, the scheduler's
// schedule runner and its batch executor (docs/schedules.md, docs/batch.md). The replica that
// leads one serves its door over NATS request/reply, a micro service subscribed only while it
// leads (flow-schedules, flow-batches); with no leader a request gets no responders at once. The
// ingress checks its callers' requests and forwards each change there; clients never ask the
// doors themselves (their role may not publish to them).
//
//	flow.scheduler.schedules.create     SchedulePut      -> ScheduleDescription
//	flow.scheduler.schedules.update     SchedulePut      -> ScheduleDescription
//	flow.scheduler.schedules.<op>       ScheduleRequest  -> ScheduleDescription (op: delete, pause, unpause, trigger, backfill)
//	flow.scheduler.batches.create       batch.Job        -> BatchResponse (its ID, spec and filter schema; the executor sets the rest)
//	flow.scheduler.batches.stop         BatchStopRequest -> BatchResponse
//
// An error is a reply with an empty body and micro's error headers: Nats-Service-Error-Code is
// the IngressCode, Nats-Service-Error the message, both as the ingress answers its callers.
const (
	SchedulerPrefix         = "flow.scheduler."
	SchedulerSchedulesGroup = SchedulerPrefix + "schedules"
	SchedulerBatchesGroup   = SchedulerPrefix + "batches"
	// SchedulerSchedulesService and SchedulerBatchesService are the doors' micro service names.
	SchedulerSchedulesService = "flow-schedules"
	SchedulerBatchesService   = "flow-batches"
	BatchOpCreate             = "create"
	BatchOpStop               = "stop"
)

// SchedulerScheduleSubject returns the subject of the schedule runner's operation op.
func SchedulerScheduleSubject(op string) string { return SchedulerSchedulesGroup + "." + op }

// SchedulerBatchSubject returns the subject of the batch executor's operation op.
func SchedulerBatchSubject(op string) string { return SchedulerBatchesGroup + "." + op }

// SchedulePut is a create or an update of a schedule: the schedule as the ingress checked it
// (its spec, definition, queue, input and policies; its state is ignored), and the request's
// paused flag and note.
type SchedulePut struct {
	Schedule schedule.Schedule `json:"schedule"`
	Paused   bool              `json:"paused,omitempty"`
	Note     string            `json:"note,omitempty"`
}
