package flow

import (
	"encoding/json"
	"fmt"

	"github.com/flowrun/flow/pkg/event"
)

// RunError reports a run that did not complete: it failed, was cancelled, is blocked, or has
// not ended yet (then it matches ErrNotEnded).
type RunError struct {
	// RunID is the run; Status how it stands (failed, cancelled, blocked, or still active).
	RunID  string
	Status Status
	// Kind and Message describe the failure, the cancellation reason or the blocking diagnosis.
	Kind    string
	Message string
}

func (e *RunError) Error() string {
	msg := fmt.Sprintf("flow: run %q %s", e.RunID, e.Status)
	if e.Message != "" {
		msg += ": " + (event.ErrorInfo{Kind: e.Kind, Message: e.Message}).Error()
	}
	return msg
}

// Is matches ErrNotEnded while the run is active and not blocked.
func (e *RunError) Is(target error) bool {
	return target == ErrNotEnded && !e.Status.Terminal() && e.Status != StatusBlocked
}

// DecodeResult decodes the output of the completed run s into out (which may be nil). For a run
// that did not complete it returns a *RunError. A run that continued as new has not completed:
// follow Outcome.SuccessorRunID.
func DecodeResult(s *Snapshot, out any) error {
	runErr := &RunError{RunID: s.RunID, Status: s.Status}
	switch {
	case s.Status == StatusCompleted:
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(s.Outcome.Output, out); err != nil {
			return fmt.Errorf("decoding the output of run %q into %T: %w", s.RunID, out, err)
		}
		return nil
	case s.Status == StatusFailed:
		runErr.Kind, runErr.Message = s.Outcome.Error.Kind, s.Outcome.Error.Message
	case s.Status == StatusCancelled:
		runErr.Kind, runErr.Message = "cancelled", s.Outcome.Reason
	case s.Status == StatusContinuedAsNew:
		runErr.Message = "continued as run " + s.Outcome.SuccessorRunID
	case s.Blocked != nil:
		runErr.Kind, runErr.Message = s.Blocked.Kind, s.Blocked.Detail
	}
	return runErr
}
