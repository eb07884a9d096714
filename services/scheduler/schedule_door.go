package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/api"
)

// serveScheduleDoor serves the changes of schedules the ingress forwards (create, update,
// delete, pause, unpause, trigger, backfill) while the runner leads; close stops it. Each is a
// compare-and-set of the schedule's entry, as the runner's rounds are: the one that loses reads
// the entry again and repeats.
func (r *scheduleRunner) serveDoor() (close func(), err error) {
	st := r.schedules
	put := func(create bool) doorOp {
		return func(ctx context.Context, data []byte) (any, *api.IngressError) {
			var p api.SchedulePut
			if err := json.Unmarshal(data, &p); err != nil {
				return nil, &api.IngressError{Code: api.CodeInvalidJSON, Message: fmt.Sprintf("the request is not a schedule: %v", err)}
			}
			if create {
				return st.Create(ctx, p.Schedule, p.Paused, p.Note, time.Now())
			}
			return st.Update(ctx, p.Schedule, p.Paused, p.Note, time.Now())
		}
	}
	ops := map[string]doorOp{api.ScheduleOpCreate: put(true), api.ScheduleOpUpdate: put(false)}
	for _, op := range []string{api.ScheduleOpDelete, api.ScheduleOpPause, api.ScheduleOpUnpause, api.ScheduleOpTrigger, api.ScheduleOpBackfill} {
		ops[op] = func(ctx context.Context, data []byte) (any, *api.IngressError) {
			var req api.ScheduleRequest
			if err := json.Unmarshal(data, &req); err != nil {
				return nil, &api.IngressError{Code: api.CodeInvalidJSON, Message: fmt.Sprintf("the request is not a schedule request: %v", err)}
			}
			return st.Apply(ctx, op, req, time.Now())
		}
	}
	return openDoor(r.nc, r.logger, api.SchedulerSchedulesService, "Flow's schedule runner: the one writer of FLOW_SCHEDULES (changes forwarded by the ingress)",
		api.SchedulerSchedulesGroup, ops, &r.door)
}

// AnswersSchedules reports whether this replica serves the changes of schedules: it leads the
// schedule runner, and the server has its door's subscriptions.
func (s *Scheduler) AnswersSchedules() bool { return s.schedules.Answering() }

// Answering reports whether the runner serves its door: it leads, and the server has the door's
// subscriptions.
func (r *scheduleRunner) Answering() bool { return r.door.Load() }
