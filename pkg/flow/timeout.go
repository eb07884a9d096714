package flow

import (
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
)

// WithStartToCloseTimeout bounds each attempt of the step from its start to its result. The
// attempt's context is cancelled when it passes, and the scheduler fails an attempt whose
// worker died, from its start as recorded in FLOW_HEARTBEATS.
func WithStartToCloseTimeout(d time.Duration) StepOption {
	return func(s *Step) { s.StartToCloseTimeout = d }
}

// WithScheduleToStartTimeout bounds the time from the moment an attempt is in flight
// (step.scheduled or step.retry_fired) to its start by a worker (waiting for a step slot, or
// for a worker of the run's queue).
func WithScheduleToStartTimeout(d time.Duration) StepOption {
	return func(s *Step) { s.ScheduleToStartTimeout = d }
}

// WithHeartbeatTimeout makes the step heartbeat: an attempt that records no [Heartbeat] (nor
// its start) within d is failed by the scheduler, within about a second of the deadline, so
// that a dead worker's step is retried in seconds rather than after the task's ack wait.
func WithHeartbeatTimeout(d time.Duration) StepOption {
	return func(s *Step) { s.HeartbeatTimeout = d }
}

// timeouts returns the step's timeouts as a decision records them, nil for none.
func (s Step) timeouts() *event.StepTimeouts {
	t := &event.StepTimeouts{ScheduleToStart: event.Duration(s.ScheduleToStartTimeout),
		StartToClose: event.Duration(s.StartToCloseTimeout), Heartbeat: event.Duration(s.HeartbeatTimeout)}
	if t.IsZero() {
		return nil
	}
	return t
}

// WithRunTimeouts sets the default execution and run timeouts of the definition's runs (0 for
// none): a start that sets neither gets them. The execution timeout bounds a run and the runs
// it continues as, the run timeout each run alone.
func WithRunTimeouts(execution, run time.Duration) WorkflowOption {
	return func(w *workflowEntry) {
		if execution < 0 || run < 0 {
			panic(fmt.Sprintf("flow: WithRunTimeouts(%s, %s): a timeout must not be negative", execution, run))
		}
		if execution == 0 && run == 0 {
			w.timeouts = nil
			return
		}
		w.timeouts = &event.RunTimeouts{Execution: event.Duration(execution), Run: event.Duration(run)}
	}
}

// runTimeouts returns the default run timeouts of definition's runs (WithRunTimeouts), nil for
// none.
func (r *Registry) runTimeouts(definition string) *event.RunTimeouts {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if w, ok := r.workflows[definition]; ok && w.timeouts != nil {
		t := *w.timeouts
		return &t
	}
	return nil
}

// timeoutExtensions adds a start's run timeouts to ext, the CloudEvents extensions of a start.
func timeoutExtensions(ext map[string]string, opts *StartOptions) error {
	if opts == nil {
		return nil
	}
	if opts.ExecutionTimeout < 0 || opts.RunTimeout < 0 {
		return fmt.Errorf("%w: a run timeout must not be negative (execution %s, run %s)", ErrInvalidInput, opts.ExecutionTimeout, opts.RunTimeout)
	}
	if opts.ExecutionTimeout > 0 {
		ext[api.ExtExecutionTimeout] = opts.ExecutionTimeout.String()
	}
	if opts.RunTimeout > 0 {
		ext[api.ExtRunTimeout] = opts.RunTimeout.String()
	}
	return nil
}
