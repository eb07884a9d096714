package flow

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/flowrun/flow/internal/sdk"
)

// Heartbeat records details (encoded to JSON) as the progress of the step attempt that ctx
// belongs to (docs/timeouts.md). It is throttled: it writes to FLOW_HEARTBEATS at most once per
// interval (0.8 times the step's heartbeat timeout, and at most a second), and the last details
// held back are written when the attempt returns. Each write keeps a step with a heartbeat
// timeout alive, and the next attempt after a retry reads the latest details with
// [HeartbeatDetails]. A write also asks the run's history whether the attempt should stop (the
// run was cancelled or ended, the attempt timed out, the step's cancellation was requested):
// then ctx is cancelled, and context.Cause(ctx) says why. Outside a step attempt run by a
// worker it does nothing. It returns an error only when details do not encode.
func Heartbeat(ctx context.Context, details any) error {
	b := sdk.BeaterOf(ctx)
	if b == nil {
		return nil
	}
	raw, err := json.Marshal(details)
	if err != nil {
		return fmt.Errorf("flow: Heartbeat: encoding details: %w", err)
	}
	return b.Beat(ctx, raw)
}

// HeartbeatDetails decodes into v the details of the latest heartbeat recorded for the step
// before this attempt started (by an earlier attempt, or by this attempt on a worker that died),
// and reports whether there were any: an attempt resumes from there. It returns false outside a
// step attempt run by a worker.
func HeartbeatDetails(ctx context.Context, v any) (bool, error) {
	b := sdk.BeaterOf(ctx)
	if b == nil {
		return false, nil
	}
	raw, ok, err := b.Details(ctx)
	if err != nil || !ok {
		return false, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("flow: HeartbeatDetails: decoding into %T: %w", v, err)
	}
	return true, nil
}
