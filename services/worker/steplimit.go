package worker

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/limits"
)

// stepLimits returns the limiter of the registry's limited steps (flow.LimitStep), shared with
// every other worker through FLOW_STEP_LIMITS; nil when no step is limited.
func (w *Worker) stepLimits(ctx context.Context, js jetstream.JetStream) (engine.StepLimiter, error) {
	if !w.reg.StepLimits() {
		return nil, nil
	}
	st, err := limits.OpenSteps(ctx, js)
	if err != nil {
		return nil, err
	}
	return limits.NewStepLimiter(st, w.reg.StepLimit), nil
}
