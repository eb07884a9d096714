package history

import "time"

// SetAwaitPoll sets the period of an await's slow poll, and a function that runs before each
// read of an await with whether the slow poll asked for it. Call it before Start.
func (s *Service) SetAwaitPoll(period time.Duration, beforeCheck func(runID string, polled bool)) {
	s.awaitPoll, s.beforeAwaitCheck = period, beforeCheck
}

// SetBeforeIndexApply sets a function that runs before the service's copy of the runs index
// applies an entry: a test slows it down to stand for a watch that lags. Call it before Start.
func (s *Service) SetBeforeIndexApply(fn func()) { s.beforeIndexApply = fn }

// SetHookClaimGrace sets how long the reconciler leaves alone a hook route to a live run that
// has not committed the hook. Call it before Start, or between calls of Reconcile with the
// background reconciler off.
func (s *Service) SetHookClaimGrace(d time.Duration) { s.hookClaimGrace = d }
