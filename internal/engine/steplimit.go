package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/core"
)

// StepLimiter takes the slots of limited step names, shared by every engine (limits.StepLimiter,
// in FLOW_LIMITS): an attempt of a limited step runs only once it holds one.
type StepLimiter interface {
	// Limited reports whether step name has a limit.
	Limited(step string) bool
	// Acquire takes a slot for attempt key of step, for a run of priority. Without a free slot
	// it returns a nil release, how long to wait, and why.
	Acquire(ctx context.Context, step, key string, priority int) (release func(), wait time.Duration, why string, err error)
}

// StepLimitedError reports a drive that stopped because the attempts its run has in flight
// wait for slots of their steps' limits: none runs here, and the task is to be redelivered
// after Wait, so that the run waits without holding a worker.
type StepLimitedError struct {
	RunID, StepID, Step string
	Attempt             int
	Wait                time.Duration
	Why                 string
}

func (e *StepLimitedError) Error() string {
	return fmt.Sprintf("flow: attempt %d of step %q (%s) of run %q waits for a slot: %s", e.Attempt, e.StepID, e.Step, e.RunID, e.Why)
}

// limitKey is the key of attempt a among the holders of its step's slots (limits.AttemptKey).
func limitKey(a core.Attempt) string { return fmt.Sprintf("%s/%s/%d", a.RunID, a.StepID, a.Attempt) }

// acquire takes a slot for attempt a when its step is limited, and reports whether the attempt
// may run, with the release to call once it returns. An attempt that may not run is recorded in
// d.limited.
func (d *driver) acquire(ctx context.Context, a core.Attempt) (ok bool, release func(), err error) {
	l := d.e.stepLimits
	if l == nil || !l.Limited(a.Name) {
		return true, func() {}, nil
	}
	release, wait, why, err := l.Acquire(ctx, a.Name, limitKey(a), d.s.Priority)
	if err != nil {
		return false, nil, fmt.Errorf("taking a slot of step %q: %w", a.Name, err)
	}
	if release == nil {
		if d.limited == nil || wait < d.limited.Wait {
			d.limited = &StepLimitedError{RunID: d.runID, StepID: a.StepID, Step: a.Name, Attempt: a.Attempt, Wait: wait, Why: why}
		}
		return false, nil, nil
	}
	return true, release, nil
}
