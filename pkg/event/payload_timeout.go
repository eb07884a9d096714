package event

import (
	"errors"
	"time"
)

// The timeout kinds: the Error.Kind (and StepFailed.Timeout) of an attempt a step timeout ended,
// and the Error.Kind of a run.failed a run timeout ended (with Cause CauseTimeout). See
// docs/timeouts.md.
const (
	// TimeoutScheduleToStart: no worker started the attempt within the step's
	// schedule-to-start timeout of the event that put it in flight.
	TimeoutScheduleToStart = "schedule_to_start_timeout"
	// TimeoutStartToClose: the attempt did not end within its start-to-close timeout of its
	// start.
	TimeoutStartToClose = "start_to_close_timeout"
	// TimeoutHeartbeat: the attempt sent no heartbeat within its heartbeat timeout (its worker
	// died, or the step code stopped heartbeating).
	TimeoutHeartbeat = "heartbeat_timeout"
	// TimeoutRun: the run did not end within its run timeout of its own run.started.
	TimeoutRun = "run_timeout"
	// TimeoutExecution: the chain of runs (a run and the runs it continued as) did not end
	// within its execution timeout of the first run's run.started.
	TimeoutExecution = "execution_timeout"
)

// StepTimeouts are a step's per-attempt timeouts, recorded in step.scheduled. A zero timeout
// is none.
type StepTimeouts struct {
	// ScheduleToStart bounds the time from the event that puts an attempt in flight
	// (step.scheduled or step.retry_fired) to the attempt's start by a worker.
	ScheduleToStart Duration `json:"schedule_to_start,omitempty"`
	// StartToClose bounds one attempt from its start to its result.
	StartToClose Duration `json:"start_to_close,omitempty"`
	// Heartbeat bounds the time between two heartbeats of an attempt (flow.Heartbeat), the
	// first counted from the attempt's start.
	Heartbeat Duration `json:"heartbeat,omitempty"`
}

// IsZero reports whether no timeout is set.
func (t *StepTimeouts) IsZero() bool {
	return t == nil || (t.ScheduleToStart == 0 && t.StartToClose == 0 && t.Heartbeat == 0)
}

// Equal reports whether t and u set the same timeouts (nil equals all zero).
func (t *StepTimeouts) Equal(u *StepTimeouts) bool {
	if t.IsZero() || u.IsZero() {
		return t.IsZero() == u.IsZero()
	}
	return *t == *u
}

func (t *StepTimeouts) validate(prefix string) error {
	if t == nil {
		return nil
	}
	return errors.Join(nonNegative(prefix+"schedule_to_start", t.ScheduleToStart),
		nonNegative(prefix+"start_to_close", t.StartToClose), nonNegative(prefix+"heartbeat", t.Heartbeat))
}

// RunTimeouts are a run's timeouts, recorded in run.started with the deadlines they give.
type RunTimeouts struct {
	// Execution bounds the chain of runs: this run and the runs it continues as.
	Execution Duration `json:"execution,omitempty"`
	// ExecutionDeadline is the first run's run.started time plus Execution; a continuation
	// carries it over unchanged.
	ExecutionDeadline time.Time `json:"execution_deadline,omitzero"`
	// Run bounds this run alone; a continuation gets the same timeout, counted from its own
	// run.started.
	Run Duration `json:"run,omitempty"`
	// RunDeadline is this run's run.started time plus Run.
	RunDeadline time.Time `json:"run_deadline,omitzero"`
}

func (t *RunTimeouts) validate() error {
	if t == nil {
		return nil
	}
	var errs []error
	errs = append(errs, nonNegative("timeouts.execution", t.Execution), nonNegative("timeouts.run", t.Run))
	if t.Execution > 0 && t.ExecutionDeadline.IsZero() {
		errs = append(errs, fieldError("timeouts.execution_deadline", "is required with timeouts.execution"))
	}
	if t.Run > 0 && t.RunDeadline.IsZero() {
		errs = append(errs, fieldError("timeouts.run_deadline", "is required with timeouts.run"))
	}
	return errors.Join(errs...)
}

func nonNegative(field string, d Duration) error {
	if d < 0 {
		return fieldError(field, "must not be negative")
	}
	return nil
}

func validateTimeoutKind(k string) error {
	switch k {
	case "", TimeoutScheduleToStart, TimeoutStartToClose, TimeoutHeartbeat:
		return nil
	}
	return fieldError("timeout", "must be schedule_to_start_timeout, start_to_close_timeout or heartbeat_timeout")
}
