package torture

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Settled is the state a sequence settled into (or was left in when the settle bound passed).
type Settled struct {
	Runs  map[string]*Run
	State *State
	// At is when the state was read.
	At        time.Time
	TapErrors []string
	// Stranded are the runs' obligations left at the bound, by run key; Unsettled says what
	// else kept the stack busy then.
	Stranded  map[string]string
	Unsettled []string
}

// settle waits until the sequence's effects are over: every run ended or waits for something
// the sequence will never send, no timer, delay or retention deletion is pending, the history
// service consumed every commit, no batch job runs, and FLOW_HISTORY was quiet for quiet. It
// polls, and gives up at bound, returning what was left.
func settle(ctx context.Context, js jetstream.JetStream, tap *Tap, ledger *Ledger, quiet, bound time.Duration) (*Settled, error) {
	deadline := time.Now().Add(bound)
	for {
		commits, tapErrs := tap.Snapshot()
		st, err := ReadState(ctx, js)
		if err != nil {
			if ctx.Err() != nil || time.Now().After(deadline) {
				return nil, fmt.Errorf("torture: reading the buckets: %w", err)
			}
			continue // a restarted service may be recreating a bucket
		}
		now := time.Now()
		runs := BuildRuns(commits, st.Tombstones(), st.Archives, st.Payloads)
		s := &Settled{Runs: runs, State: st, At: now, TapErrors: tapErrs, Stranded: obligations(runs, ledger, now)}
		s.Unsettled = busy(runs, st, now)
		if q := tap.Quiet(); q < quiet {
			s.Unsettled = append(s.Unsettled, fmt.Sprintf("FLOW_HISTORY was written %s ago", q.Round(time.Millisecond)))
		}
		if len(s.Stranded) == 0 && len(s.Unsettled) == 0 {
			return s, nil
		}
		if now.After(deadline) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// obligations returns what each live run owes (Run.Obligation), by run key.
func obligations(runs map[string]*Run, ledger *Ledger, now time.Time) map[string]string {
	out := map[string]string{}
	free := func(r *Run) bool { return slotFree(runs, r, now) }
	exists := map[string]bool{}
	for _, r := range runs {
		exists[r.ID] = true
	}
	for k, r := range runs {
		if o := r.Obligation(now, ledger.DefPaused(r.Def), free); o != "" {
			out[k] = o
			continue
		}
		// The runs a run's history says exist must exist: its successor, its children.
		if r.Successor != "" && !exists[r.Successor] {
			out[k] = fmt.Sprintf("continued as new as run %s, which was never started", r.Successor)
		}
		if !r.Ended() {
			for id, c := range r.Children {
				if !c.Settled && c.RunID != "" && !exists[c.RunID] {
					out[k] = fmt.Sprintf("waits for child %s, whose run %s was never started", id, c.RunID)
				}
			}
		}
	}
	return out
}

// slotFree reports whether queued run r fits its control's limits now.
func slotFree(runs map[string]*Run, r *Run, now time.Time) bool {
	ctl := r.Control
	all, ofKey := 0, 0
	var admissions, keyAdmissions []time.Time
	for _, o := range runs {
		if o.Control == nil || o.Control.Group != ctl.Group {
			continue
		}
		if o.HoldsSlotAt(now) {
			all++
			if o.Control.Key == ctl.Key {
				ofKey++
			}
		}
		admissions = append(admissions, o.Admissions...)
		if o.Control.Key == ctl.Key {
			keyAdmissions = append(keyAdmissions, o.Admissions...)
		}
	}
	within := func(ts []time.Time, d time.Duration) int {
		n := 0
		for _, t := range ts {
			if now.Sub(t) <= d {
				n++
			}
		}
		return n
	}
	switch {
	case ctl.Concurrency > 0 && all >= ctl.Concurrency,
		ctl.KeyConcurrency > 0 && ofKey >= ctl.KeyConcurrency,
		ctl.Rate > 0 && within(admissions, time.Duration(ctl.RatePeriod)) >= ctl.Rate,
		ctl.KeyRate > 0 && within(keyAdmissions, time.Duration(ctl.KeyRatePeriod)) >= ctl.KeyRate:
		return false
	}
	return true
}

// busy says what, besides the runs' obligations, is still going on: timers and delays not due
// yet, retention deletions due or under way, commits the history service has not applied,
// batch jobs running.
func busy(runs map[string]*Run, st *State, now time.Time) []string {
	var out []string
	for run, timers := range st.Timers {
		for _, t := range timers {
			if now.Before(t.Due.Add(timerGrace)) {
				out = append(out, fmt.Sprintf("run %s's timer entry %s", run, t))
			}
		}
	}
	if st.Pending > 0 || st.AckPending > 0 {
		out = append(out, fmt.Sprintf("the history service has %d commits to read and %d unacknowledged", st.Pending, st.AckPending))
	}
	var ids []string
	for id, state := range st.Batches {
		if state == "pending" || state == "running" {
			ids = append(ids, id)
		}
	}
	if len(ids) > 0 {
		sort.Strings(ids)
		out = append(out, "batch jobs "+strings.Join(ids, ", ")+" have not ended")
	}
	keys := make([]string, 0, len(runs))
	for k := range runs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r := runs[k]
		switch {
		case r.Ended():
			if retained(r) && st.Damaged[r.ID] == "" && (r.Tombstone == nil || !r.Tombstone.Purged) && now.Sub(r.End) > BriefRetention {
				out = append(out, fmt.Sprintf("run %s ended at %s and is not deleted yet", k, r.End.Format(timeFormat)))
			}
		case !r.NotBefore.IsZero() && !r.DelayFired && now.Before(r.NotBefore):
			out = append(out, fmt.Sprintf("run %s is delayed until %s", k, r.NotBefore.Format(timeFormat)))
		default:
			for id, w := range r.Waits {
				if !w.Fired && now.Before(w.Deadline) {
					out = append(out, fmt.Sprintf("run %s's timer %s is due at %s", k, id, w.Deadline.Format(timeFormat)))
				}
			}
			for id, s := range r.Steps {
				if s.Retrying && now.Before(s.RetryDue) {
					out = append(out, fmt.Sprintf("run %s's step %s retries at %s", k, id, s.RetryDue.Format(timeFormat)))
				}
			}
		}
	}
	return out
}

// retained reports whether the run's definition has the brief retention: its ended runs are
// deleted within the sequence.
func retained(r *Run) bool { return r.Def == DefBrief || r.Def == DefBriefQueue }
