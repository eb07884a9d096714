package core

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/flowrun/flow/pkg/event"
)

// Consequences are what a commit implies outside the run's own history: the work of whoever
// follows the history stream (the history service). They are a pure function of the commit and
// of the run's latest snapshot, so that deriving them again after a crash, a redelivery or on
// another replica gives the same idempotent effects.
type Consequences struct {
	// Resume is set when the commit holds an input (IsInput) that no later decision answered:
	// the run needs a drive. TaskSeq is the sequence of that input, the resume task's key.
	Resume  bool
	TaskSeq uint64
	// Timers are the timers the commit scheduled that are still pending: register them.
	Timers []Timer
	// Moot are timers the commit made pointless (a retry whose step was cancelled, a wait of a
	// run that ended): delete their entries.
	Moot []Timer
	// Children are the child runs the commit scheduled that have not settled: start them.
	Children []event.ChildSpec
	// CancelRuns are the child runs the commit asks to cancel (ctx.CancelChild with try_cancel
	// or wait_cancelled): append run.cancel_requested to each (see ChildCancellations).
	CancelRuns []CancelRun
	// Ended is set when the commit holds the terminal event: the end-of-run work is due (the
	// parent's notice or the successor's start, children cancelled per policy, hook tokens
	// released).
	Ended bool
}

// Derive returns the consequences of commit, the events of one append of run s.RunID, given s,
// the run's snapshot at or after the commit's last event. Effects that a later event of s made
// moot are left out: a timer that already fired, a child that settled, a resume the run already
// decided on.
func Derive(s *Snapshot, commit []event.Envelope) Consequences {
	var c Consequences
	terminal := s.Terminal()
	for _, e := range commit {
		// A delayed run makes no decision: its inputs wait for run.delay_fired, itself an input,
		// but for a cancellation request, which ends it.
		// A paused run decides nothing either: its inputs wait for run.unpaused, an input.
		if IsInput(e.Payload) && !terminal && (!s.Delayed || s.CancelRequested) && s.Paused == nil && e.Seq > s.decidedSeq {
			c.Resume, c.TaskSeq = true, e.Seq
		}
		deriveTimeouts(s, e, &c)
		switch p := e.Payload.(type) {
		case *event.WaitScheduled:
			if w, ok := s.Waits[p.WaitID]; ok && !w.Fired && !terminal {
				c.Timers = append(c.Timers, Timer{RunID: s.RunID, Kind: TimerWait, ID: w.ID, Due: w.Deadline, Seq: w.Seq})
			}
		case *event.StepRetryScheduled:
			if st, ok := s.Steps[p.StepID]; ok && st.Status == StepRetrying && st.Attempt == p.Attempt && !terminal {
				c.Timers = append(c.Timers, Timer{RunID: s.RunID, Kind: TimerRetry, ID: st.ID, Attempt: p.Attempt, Due: p.Due, Seq: e.Seq})
			}
		case *event.RunStarted, *event.RunDebounced:
			// The start timer of the event that set the run's NotBefore, while it is pending;
			// the one a run.debounced replaces is moot.
			if s.Delayed && s.NotBeforeSeq == e.Seq && !terminal {
				c.Timers = append(c.Timers, startTimer(s))
			}
			if d, ok := p.(*event.RunDebounced); ok && d.Replaces > 0 {
				c.Moot = append(c.Moot, Timer{RunID: s.RunID, Kind: TimerStart, ID: strconv.FormatUint(d.Replaces, 10)})
			}
		case *event.StepCancelled:
			for _, cs := range p.Steps {
				if !cs.SideEffectUnknown {
					// The step was waiting out a backoff: its retry timer is pending.
					c.Moot = append(c.Moot, Timer{RunID: s.RunID, Kind: TimerRetry, ID: cs.StepID, Attempt: cs.Attempt})
				}
				c.Moot = append(c.Moot, stepStartMoot(s, cs.StepID, cs.Attempt)...)
			}
		// A timer's firing, or the end of what it waited for, makes its entry moot: the timer
		// index holds exactly the pending timers (Timers), and the scheduler deletes nothing.
		case *event.WaitFired:
			c.Moot = append(c.Moot, Timer{RunID: s.RunID, Kind: TimerWait, ID: p.WaitID})
		case *event.StepRetryFired:
			c.Moot = append(c.Moot, Timer{RunID: s.RunID, Kind: TimerRetry, ID: p.StepID, Attempt: p.Attempt})
		case *event.ChildRetryFired:
			c.Moot = append(c.Moot, Timer{RunID: s.RunID, Kind: TimerChildRetry, ID: p.ChildID, Attempt: p.Attempt})
		case *event.RunDelayFired:
			c.Moot = append(c.Moot, startTimer(s))
		case *event.StepCompleted:
			c.Moot = append(c.Moot, stepStartMoot(s, p.StepID, p.Attempt)...)
		case *event.StepFailed:
			c.Moot = append(c.Moot, stepStartMoot(s, p.StepID, p.Attempt)...)
		case *event.ChildScheduled:
			for _, spec := range p.Children {
				if ch, ok := s.Children[spec.ChildID]; ok && !ch.Settled && !terminal {
					c.Children = append(c.Children, spec)
				}
			}
		}
		deriveChildRetry(s, e, &c)
		if rs, ok := e.Payload.(*event.RunStarted); ok && rs.ResetFrom != nil && !terminal && !s.Delayed {
			// A reset run's first commit ends where a decision is due, though its last event
			// may be a step result, which is not an input.
			if last := commit[len(commit)-1].Seq; last > s.decidedSeq {
				c.Resume, c.TaskSeq = true, last
			}
		}
		if e.Type().Terminal() {
			c.Ended = true
			var waits []Timer
			for _, w := range s.Waits {
				if !w.Fired {
					waits = append(waits, Timer{RunID: s.RunID, Kind: TimerWait, ID: w.ID, Due: w.Deadline})
				}
			}
			slices.SortFunc(waits, func(a, b Timer) int { return cmp.Compare(a.ID, b.ID) })
			c.Moot = append(c.Moot, waits...)
			if s.Delayed {
				c.Moot = append(c.Moot, startTimer(s)) // ended (terminated) before its delay fired
			}
			c.Moot = append(c.Moot, mootTimeouts(s)...)
		}
	}
	deriveChildCancel(s, commit, &c)
	return c
}

// stepStartMoot returns the schedule-to-start timer of attempt attempt of step stepID, which a
// result of the attempt makes moot, if the step has that timeout.
func stepStartMoot(s *Snapshot, stepID string, attempt int) []Timer {
	st, ok := s.Steps[stepID]
	if !ok || st.Timeouts == nil || st.Timeouts.ScheduleToStart <= 0 {
		return nil
	}
	return []Timer{{RunID: s.RunID, Kind: TimerStepStart, ID: stepID, Attempt: attempt}}
}
