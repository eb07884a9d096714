package engine

import (
	"encoding/json"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// HeartbeatEntry is a step's entry in FLOW_HEARTBEATS (internal/heartbeats keys it): the latest
// attempt that started, when, its timeouts, and the details of the latest heartbeat of any
// attempt.
// Workers alone write it; the scheduler's watcher reads the deadlines from it, and asks the
// run's history whether the attempt is still in flight (docs/timeouts.md). An entry written by
// an earlier version may carry "settled", which is ignored.
type HeartbeatEntry struct {
	RunID   string `json:"run_id"`
	StepID  string `json:"step_id"`
	Attempt int    `json:"attempt"`
	// Started is when Attempt started, by the worker's clock. Its heartbeat deadline counts
	// from the entry's latest write, by the server's clock.
	Started time.Time `json:"started"`
	// Heartbeat and StartToClose are the step's recorded timeouts (0 for none).
	Heartbeat    event.Duration `json:"heartbeat,omitempty"`
	StartToClose event.Duration `json:"start_to_close,omitempty"`
	// Details are the latest heartbeat's details, recorded by DetailsAttempt (which may be an
	// earlier attempt than Attempt: a new attempt carries them over until it beats).
	Details        json.RawMessage `json:"details,omitempty"`
	DetailsAttempt int             `json:"details_attempt,omitempty"`
	// Worker is the worker that runs Attempt.
	Worker string `json:"worker,omitempty"`
}

// Deadline returns the entry's next deadline, with the timeout kind that passes then, given
// written, the time of the entry's latest write: the heartbeat timeout counts from written,
// the start-to-close timeout from Started. ok is false when nothing is watched.
func (h *HeartbeatEntry) Deadline(written time.Time) (at time.Time, kind string, ok bool) {
	if h.Heartbeat > 0 {
		at, kind, ok = written.Add(time.Duration(h.Heartbeat)), event.TimeoutHeartbeat, true
	}
	if h.StartToClose > 0 {
		if c := h.Started.Add(time.Duration(h.StartToClose)); !ok || c.Before(at) {
			at, kind, ok = c, event.TimeoutStartToClose, true
		}
	}
	return at, kind, ok
}
