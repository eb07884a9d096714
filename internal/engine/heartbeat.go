package engine

import (
	"context"
	"errors"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/pkg/event"
)

// TimeoutStep ends attempt of step stepID of run runID because its timeout kind passed
// (event.TimeoutStartToClose or event.TimeoutHeartbeat; the schedule-to-start timeout is a
// timer, see Fire): it appends step.failed naming the timeout, with its retry when attempts are
// left, and asks for the run to be driven. The append is at the expected sequence and only
// while that attempt is in flight, so a result committed first wins and a late result of the
// timed-out attempt is refused (core.StepResult's attempt guard). It reports false, nil when
// the attempt is no longer in flight.
func (e *Engine) TimeoutStep(ctx context.Context, runID, stepID string, attempt int, kind string) (bool, error) {
	err := e.external(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.TimeoutStep(s, stepID, attempt, kind, e.now(s))
	})
	if errors.Is(err, core.ErrStale) || errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrTerminal) {
		return false, nil
	}
	return err == nil, err
}

// CheckAttempt reads run runID as it is now and says whether attempt of step stepID should
// stop: the answer to a heartbeat (core.CheckAttempt). A run that continued as new is not
// followed: its steps are over.
func (e *Engine) CheckAttempt(ctx context.Context, runID, stepID string, attempt int) (core.AttemptCheck, error) {
	s, err := e.ReadSnapshot(ctx, runID)
	if err != nil {
		return core.AttemptCheck{}, err
	}
	return core.CheckAttempt(s, stepID, attempt), nil
}

// successorTimeout is the execution (or, with execution false, the run) timeout that the
// continuation of s starts with: the ones s recorded.
func successorTimeout(s *core.Snapshot, execution bool) time.Duration {
	if s.Timeouts == nil {
		return 0
	}
	if execution {
		return time.Duration(s.Timeouts.Execution)
	}
	return time.Duration(s.Timeouts.Run)
}

// Heartbeats records the starts and heartbeats of step attempts in FLOW_HEARTBEATS, for the
// scheduler's watcher and for the next attempt's flow.HeartbeatDetails (services/worker).
type Heartbeats interface {
	// Begin is called as attempt a starts in this engine. It records the start when the step
	// has timeouts, and returns the context to run the attempt in, carrying a Beater; check
	// reads the run's history and answers a heartbeat. end is called with the attempt's
	// outcome once it returned: it may rewrite it (the worker's own start-to-close deadline).
	Begin(ctx context.Context, a core.Attempt, check func(context.Context) (core.AttemptCheck, error)) (actx context.Context, end func(*core.StepOutcome))
}

// Beater is what step code's flow.Heartbeat and flow.HeartbeatDetails reach through the
// attempt's context (sdk.Beater, the seam pkg/flow reads).
type Beater = sdk.Beater

// WithBeater returns ctx carrying b, where pkg/flow finds it (sdk.WithBeater).
func WithBeater(ctx context.Context, b Beater) context.Context { return sdk.WithBeater(ctx, b) }

// BeaterOf returns the Beater ctx carries, or nil outside a step attempt with heartbeats.
func BeaterOf(ctx context.Context) Beater { return sdk.BeaterOf(ctx) }
