package flow

import (
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// StatusPaused: the run is paused (run.paused): it decides nothing and starts no step attempt
// until it is unpaused. See docs/pause.md.
const StatusPaused = core.StatusPaused

// ExhaustionPauseRun, as a retry policy's OnExhaustion, pauses the run when the step exhausts
// its attempts with a retryable error, instead of failing it: fix what fails, unpause the run
// (`flow unpause RUN`, PauseClient.UnpauseRun), and the step gets a fresh attempt. PauseRun is the
// same value:
//
//	flow.RetryPolicy{MaxAttempts: 3, OnExhaustion: flow.PauseRun}
const (
	ExhaustionPauseRun = event.ExhaustionPauseRun
	PauseRun           = event.ExhaustionPauseRun
)
