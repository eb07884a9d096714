package core

import (
	"fmt"
	"time"
)

// StepLimit caps the attempts of one step name, shared by every worker: at most Concurrency in
// flight at once and at most Rate started in any window of Period (a sliding-window log, as for
// runs). A zero limit is no limit. Workers enforce it (internal/limits); the SDK declares it
// (flow.LimitStep).
type StepLimit struct {
	Concurrency int
	Rate        int
	Period      time.Duration
}

// Validate reports a limit no attempt could run under.
func (l StepLimit) Validate() error {
	switch {
	case l.Concurrency < 0 || l.Rate < 0:
		return fmt.Errorf("flow: a step limit must not be negative (concurrency %d, rate %d)", l.Concurrency, l.Rate)
	case l.Rate > 0 && l.Period <= 0:
		return fmt.Errorf("flow: a step limit with a rate needs a positive period")
	case l.Concurrency == 0 && l.Rate == 0:
		return fmt.Errorf("flow: a step limit sets no limit; set Concurrency or Rate")
	}
	return nil
}
