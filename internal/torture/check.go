package torture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// Invariant names a property the checker asserts after a sequence settles.
type Invariant string

// The invariants.
const (
	// InvHistory: every history is well formed (sequences 1..n, run.started first, one terminal
	// event and nothing after it but run.reset, each step completed once, each update received,
	// judged and completed at most once, each delivery ID once).
	InvHistory Invariant = "history-well-formed"
	// InvConcurrency: no flow-control group or key ever held more admitted, live runs than its
	// limit, at any instant (rebuilt from the histories' times).
	InvConcurrency Invariant = "concurrency-limit"
	// InvRate: no window of a rate limit's period holds more admissions than the limit.
	InvRate Invariant = "rate-limit"
	// InvSlotLeak: no flow-control slot or admission queue entry belongs to a run that ended.
	InvSlotLeak Invariant = "no-slot-or-queue-entry-of-ended-run"
	// InvTimerLeak: no timer entry belongs to a run that ended.
	InvTimerLeak Invariant = "no-timer-of-ended-run"
	// InvQuarantine: no run is quarantined (the torture damages nothing).
	InvQuarantine Invariant = "no-quarantine-without-damage"
	// InvExactlyOnce: every acknowledged input is in the history of the run that took it,
	// exactly once.
	InvExactlyOnce Invariant = "acknowledged-input-exactly-once"
	// InvUpdateAnswer: every update's answer agrees with its run's history (and an update
	// answered aborted is applied nowhere).
	InvUpdateAnswer Invariant = "update-answer-matches-history"
	// InvArchive: every deleted run was archived whole before its history was purged.
	InvArchive Invariant = "deleted-run-archived-completely"
	// InvOverlap: no run a schedule started under an overlap policy other than allow_all
	// started while another run of the schedule (or its continuation) was live.
	InvOverlap Invariant = "schedule-overlap-policy"
	// InvStranded: every run that is not waiting for something the sequence will never send
	// progressed, within the settle bound.
	InvStranded Invariant = "no-run-stranded"
	// InvOneLive: a workflow ID has at most one live run at any instant (a reset or a
	// terminate_existing start replaces the live run; it never adds one).
	InvOneLive Invariant = "one-live-run-per-id"
	// InvIndex: the runs index agrees with the histories: an entry per run, ended exactly when
	// the history ended.
	InvIndex Invariant = "index-matches-history"
)

// Violation is one broken invariant.
type Violation struct {
	Invariant Invariant
	Runs      []string
	Detail    string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s [%s]: %s", v.Invariant, strings.Join(v.Runs, ", "), v.Detail)
}

// timerGrace is how long past its due time a moot timer may stay before it counts as left.
const timerGrace = 5 * time.Second

// Checker asserts the invariants over the runs, the buckets and the ledger.
type Checker struct {
	Runs   map[string]*Run
	State  *State
	Ledger *Ledger
	// TapErrors are the FLOW_HISTORY messages the tap could not decode.
	TapErrors []string
	// Stranded are the obligations left when the settle bound passed, by run key.
	Stranded map[string]string
	// Now is when the state was read.
	Now time.Time

	out []Violation
}

func (c *Checker) add(inv Invariant, detail string, runs ...string) {
	c.out = append(c.out, Violation{Invariant: inv, Runs: runs, Detail: detail})
}

// Check returns every violation, sorted by invariant.
func (c *Checker) Check() []Violation {
	for _, e := range c.TapErrors {
		c.add(InvHistory, "undecodable commit: "+e)
	}
	c.histories()
	c.concurrency()
	c.rates()
	c.leaks()
	c.quarantine()
	c.inputs()
	c.updates()
	c.archives()
	c.overlaps()
	c.oneLive()
	c.index()
	keys := make([]string, 0, len(c.Stranded))
	for k := range c.Stranded {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c.add(InvStranded, fmt.Sprintf("run %s %s", k, c.Stranded[k]), k)
	}
	sort.SliceStable(c.out, func(i, j int) bool { return c.out[i].Invariant < c.out[j].Invariant })
	return c.out
}

// sorted returns the runs in a stable order.
func (c *Checker) sorted() []*Run {
	rs := make([]*Run, 0, len(c.Runs))
	for _, r := range c.Runs {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Key() < rs[j].Key() })
	return rs
}

// latest returns the latest incarnation of run ID id.
func (c *Checker) latest(id string) *Run {
	var l *Run
	for _, r := range c.Runs {
		if r.ID == id && (l == nil || r.Inc > l.Inc) {
			l = r
		}
	}
	return l
}

// at returns the incarnation of run ID id live at t, else the latest.
func (c *Checker) at(id string, t time.Time) *Run {
	var best *Run
	for _, r := range c.Runs {
		if r.ID != id {
			continue
		}
		if !r.Created.IsZero() && !r.Created.After(t) && (best == nil || r.Inc > best.Inc) {
			best = r
		}
	}
	if best == nil {
		return c.latest(id)
	}
	return best
}

func (c *Checker) histories() {
	for _, r := range c.sorted() {
		for _, a := range r.Anomalies {
			c.add(InvHistory, fmt.Sprintf("run %s: %s", r.Key(), a), r.Key())
		}
		if r.Started == nil && len(r.Events) > 0 {
			c.add(InvHistory, fmt.Sprintf("run %s: its history does not begin with run.started", r.Key()), r.Key())
		}
		for id, n := range r.Deliveries {
			if n > 1 {
				c.add(InvHistory, fmt.Sprintf("run %s: delivery %q recorded %d times", r.Key(), id, n), r.Key())
			}
		}
		for _, id := range r.UpdateIDs {
			u := r.Updates[id]
			if u.Received > 1 || u.Accepted+u.Rejected > 1 || u.Completed > 1 || (u.Completed > 0 && u.Accepted == 0) {
				c.add(InvHistory, fmt.Sprintf("run %s: update %q received %d, accepted %d, rejected %d, completed %d times",
					r.Key(), id, u.Received, u.Accepted, u.Rejected, u.Completed), r.Key())
			}
		}
	}
}

// controlled returns the runs under flow control by group.
func (c *Checker) controlled() map[string][]*Run {
	groups := map[string][]*Run{}
	for _, r := range c.sorted() {
		if r.Control != nil {
			groups[r.Control.Group] = append(groups[r.Control.Group], r)
		}
	}
	return groups
}

func (c *Checker) concurrency() {
	for group, runs := range c.controlled() {
		for _, r := range runs {
			if !r.Admitted {
				continue
			}
			t := r.AdmittedAt
			var all, ofKey []string
			for _, o := range runs {
				if o.HoldsSlotAt(t) {
					all = append(all, o.Key())
					if o.Control.Key == r.Control.Key {
						ofKey = append(ofKey, o.Key())
					}
				}
			}
			ctl := r.Control
			if ctl.Concurrency > 0 && len(all) > ctl.Concurrency {
				c.add(InvConcurrency, fmt.Sprintf("group %s held %d live admitted runs at %s (limit %d) when run %s was admitted: %s",
					group, len(all), t.Format(timeFormat), ctl.Concurrency, r.Key(), c.describeSlots(all)), all...)
			}
			if ctl.KeyConcurrency > 0 && len(ofKey) > ctl.KeyConcurrency {
				c.add(InvConcurrency, fmt.Sprintf("group %s key %q held %d live admitted runs at %s (limit %d) when run %s was admitted: %s",
					group, ctl.Key, len(ofKey), t.Format(timeFormat), ctl.KeyConcurrency, r.Key(), c.describeSlots(ofKey)), ofKey...)
			}
		}
	}
}

func (c *Checker) describeSlots(keys []string) string {
	var parts []string
	for _, k := range keys {
		r := c.Runs[k]
		s := fmt.Sprintf("%s admitted %s", k, r.AdmittedAt.Format(timeFormat))
		if r.Reset != nil && r.Copied(seqOfFirstAdmission(r)) {
			s += fmt.Sprintf(" (a reset of %s that copied its run.admitted)", r.Reset.RunID)
		}
		if r.Ended() {
			s += fmt.Sprintf(", ended %s", r.Until.Format(timeFormat))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func seqOfFirstAdmission(r *Run) uint64 {
	for _, e := range r.Events {
		if e.Type() == event.TypeRunAdmitted {
			return e.Seq
		}
	}
	return 0
}

func (c *Checker) rates() {
	type adm struct {
		run string
		key string
		at  time.Time
	}
	for group, runs := range c.controlled() {
		var all []adm
		for _, r := range runs {
			for _, t := range r.Admissions {
				all = append(all, adm{run: r.Key(), key: r.Control.Key, at: t})
			}
		}
		sort.Slice(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
		for _, r := range runs {
			ctl := r.Control
			for _, t := range r.Admissions {
				count := func(keyed bool, period time.Duration) []string {
					var in []string
					for _, a := range all {
						if (!keyed || a.key == ctl.Key) && !a.at.After(t) && t.Sub(a.at) <= period {
							in = append(in, a.run)
						}
					}
					return in
				}
				if ctl.Rate > 0 {
					if in := count(false, time.Duration(ctl.RatePeriod)); len(in) > ctl.Rate {
						c.add(InvRate, fmt.Sprintf("group %s admitted %d runs in the %s before %s (limit %d)", group, len(in),
							time.Duration(ctl.RatePeriod), t.Format(timeFormat), ctl.Rate), in...)
					}
				}
				if ctl.KeyRate > 0 {
					if in := count(true, time.Duration(ctl.KeyRatePeriod)); len(in) > ctl.KeyRate {
						c.add(InvRate, fmt.Sprintf("group %s key %q admitted %d runs in the %s before %s (limit %d)", group, ctl.Key, len(in),
							time.Duration(ctl.KeyRatePeriod), t.Format(timeFormat), ctl.KeyRate), in...)
					}
				}
			}
		}
	}
}

func (c *Checker) leaks() {
	for group, holders := range c.State.Holders {
		for run := range holders {
			r := c.latest(run)
			switch {
			case r == nil:
				c.add(InvSlotLeak, fmt.Sprintf("flow-control entry %s holds a slot for run %s, which has no history", group, run), run)
			case r.Ended():
				c.add(InvSlotLeak, fmt.Sprintf("flow-control entry %s holds a slot for run %s, which ended (%s at %s)", group, run,
					r.EndType, r.End.Format(timeFormat)), r.Key())
			}
		}
	}
	for run := range c.State.Queue {
		r := c.latest(run)
		switch {
		case r == nil:
			c.add(InvSlotLeak, fmt.Sprintf("the admission queue lists run %s, which has no history", run), run)
		case r.Ended():
			c.add(InvSlotLeak, fmt.Sprintf("the admission queue lists run %s, which ended (%s at %s)", run, r.EndType, r.End.Format(timeFormat)), r.Key())
		case r.Admitted:
			c.add(InvSlotLeak, fmt.Sprintf("the admission queue lists run %s, which was admitted at %s", run, r.AdmittedAt.Format(timeFormat)), r.Key())
		}
	}
	for run, timers := range c.State.Timers {
		r := c.latest(run)
		if r == nil || !r.Ended() {
			continue
		}
		// A timer of an ended run is moot: fired when due, it is deleted. The settle waited
		// for every entry to fall due.
		var left []TimerEntry
		for _, t := range timers {
			if t.Due.Before(c.Now.Add(-timerGrace)) {
				left = append(left, t)
			}
		}
		if len(left) > 0 {
			c.add(InvTimerLeak, fmt.Sprintf("timers %v of run %s are left, although it ended (%s at %s)", left, run, r.EndType, r.End.Format(timeFormat)), r.Key())
		}
	}
}

func (c *Checker) quarantine() {
	runs := make([]string, 0, len(c.State.Damaged))
	for run := range c.State.Damaged {
		runs = append(runs, run)
	}
	sort.Strings(runs)
	for _, run := range runs {
		c.add(InvQuarantine, fmt.Sprintf("run %s is quarantined, although nothing damaged it: %s", run, c.State.Damaged[run]), run)
	}
}

func (c *Checker) inputs() {
	triggers := map[string]string{} // trigger run -> request ID
	for _, a := range c.Ledger.Acks() {
		if !a.Acked {
			continue
		}
		switch a.Kind {
		case KindSignal, KindSignalWithStart:
			r := c.at(a.Run, a.At)
			n := 0
			if r != nil {
				n = r.Deliveries[a.ID]
			}
			if n != 1 {
				c.add(InvExactlyOnce, fmt.Sprintf("op %d: signal delivery %q, acknowledged as taken by run %s, is in its history %d times",
					a.Op, a.ID, a.Run, n), a.Run)
			}
			// Other histories may hold it only as copies: a reset of the run copies and
			// reapplies its inputs, and passes on those that arrive meanwhile.
			for _, o := range c.sorted() {
				if o.Deliveries[a.ID] > 0 && Family(o.ID) != Family(a.Run) {
					c.add(InvExactlyOnce, fmt.Sprintf("op %d: signal delivery %q, acknowledged as taken by run %s, is also in run %s",
						a.Op, a.ID, a.Run, o.Key()), a.Run, o.Key())
				}
			}
		case KindStart:
			if c.latest(a.Run) == nil {
				c.add(InvExactlyOnce, fmt.Sprintf("op %d: the start of %s was answered with run %s, which has no history", a.Op, a.Asked, a.Run), a.Run)
			}
		case KindReset:
			nr := c.latest(a.NewRun)
			if nr == nil {
				c.add(InvExactlyOnce, fmt.Sprintf("op %d: the reset of %s was answered with new run %s, which has no history", a.Op, a.Run, a.NewRun), a.NewRun)
				continue
			}
			old := c.at(a.Run, a.At)
			links := 0
			if old != nil {
				for _, l := range old.Resets {
					if l.NewRunID == a.NewRun {
						links++
					}
				}
			}
			if links != 1 {
				c.add(InvExactlyOnce, fmt.Sprintf("op %d: the reset of %s to new run %s is recorded in the old run %d times (want one run.reset)",
					a.Op, a.Run, a.NewRun, links), a.Run, a.NewRun)
			}
		case KindTrigger:
			if a.NewRun == "" {
				continue
			}
			if other, ok := triggers[a.NewRun]; ok && other != a.ID {
				c.add(InvExactlyOnce, fmt.Sprintf("op %d: triggers %q and %q of schedule %s were both accepted and given the same run %s",
					a.Op, other, a.ID, a.Asked, a.NewRun), a.NewRun)
			}
			triggers[a.NewRun] = a.ID
		}
	}
}

func (c *Checker) updates() {
	for _, a := range c.Ledger.Acks() {
		if a.Update == nil || a.Update.Status == "" {
			continue
		}
		r := c.at(a.Run, a.At)
		if r == nil {
			c.add(InvUpdateAnswer, fmt.Sprintf("op %d: update %q was answered %s by run %s, which has no history", a.Op, a.ID, a.Update.Status, a.Run), a.Run)
			continue
		}
		u := r.Updates[a.ID]
		if u == nil || u.Received != 1 {
			n := 0
			if u != nil {
				n = u.Received
			}
			c.add(InvExactlyOnce, fmt.Sprintf("op %d: update %q, answered %s by run %s, is received in its history %d times", a.Op, a.ID, a.Update.Status, r.Key(), n), r.Key())
			continue
		}
		switch a.Update.Status {
		case "completed":
			if u.Completed != 1 || u.Error != nil || !jsonEqual(u.Result, a.Update.Result) {
				c.add(InvUpdateAnswer, fmt.Sprintf("op %d: update %q was answered completed with %s; run %s's history has it completed %d times with %s",
					a.Op, a.ID, a.Update.Result, r.Key(), u.Completed, u.Result), r.Key())
			}
		case "failed":
			if u.Completed != 1 || u.Error == nil {
				c.add(InvUpdateAnswer, fmt.Sprintf("op %d: update %q was answered failed; run %s's history does not fail it", a.Op, a.ID, r.Key()), r.Key())
			}
		case "rejected":
			if u.Rejected != 1 || u.Accepted != 0 {
				c.add(InvUpdateAnswer, fmt.Sprintf("op %d: update %q was answered rejected; run %s's history has it accepted %d, rejected %d times",
					a.Op, a.ID, r.Key(), u.Accepted, u.Rejected), r.Key())
			}
		case "aborted":
			if u.Completed > 0 || u.Rejected > 0 || !r.Ended() {
				c.add(InvUpdateAnswer, fmt.Sprintf("op %d: update %q was answered aborted; run %s's history has it rejected %d, completed %d times (run ended: %v)",
					a.Op, a.ID, r.Key(), u.Rejected, u.Completed, r.Ended()), r.Key())
			}
			// Aborted means not applied: no other run of the workflow may complete it.
			fam := Family(r.ID)
			for _, o := range c.sorted() {
				if o == r || Family(o.ID) != fam {
					continue
				}
				if ou := o.Updates[a.ID]; ou != nil && ou.Completed > 0 {
					c.add(InvUpdateAnswer, fmt.Sprintf("op %d: update %q was answered aborted (run %s ended first), yet run %s completed it with %s",
						a.Op, a.ID, r.Key(), o.Key(), ou.Result), r.Key(), o.Key())
				}
			}
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

func (c *Checker) archives() {
	for _, r := range c.sorted() {
		t := r.Tombstone
		if t == nil {
			continue
		}
		if t.Archive == "" {
			c.add(InvArchive, fmt.Sprintf("run %s was deleted without an archive (the archive is on)", r.Key()), r.Key())
			continue
		}
		if len(r.Archive) == 0 {
			c.add(InvArchive, fmt.Sprintf("run %s's tombstone names archive %s, which does not exist", r.Key(), t.Archive), r.Key())
			continue
		}
		if !t.Purged {
			continue
		}
		archived := map[uint64]event.Type{}
		for _, e := range r.Archive {
			archived[e.Seq] = e.Type()
		}
		var lost []string
		for _, e := range r.Events {
			if _, seen := r.Stored[e.Seq]; !seen || e.Type() == event.TypeRunDeleted {
				continue // known from the archive only, or the record of the deletion the stream keeps
			}
			if at, ok := archived[e.Seq]; !ok || at != e.Type() {
				lost = append(lost, fmt.Sprintf("seq %d %s (stored %s)", e.Seq, e.Type(), r.Stored[e.Seq].Format(timeFormat)))
			}
		}
		if len(lost) > 0 {
			c.add(InvArchive, fmt.Sprintf("run %s was purged (deleted at %s) with events its archive does not hold: %s",
				r.Key(), t.At.Format(timeFormat), strings.Join(lost, ", ")), r.Key())
		}
	}
}

// policy returns the overlap policy a schedule's run started under.
func (c *Checker) policy(r *Run) (string, *ScheduleEpoch) {
	var ep *ScheduleEpoch
	for _, s := range c.Ledger.Schedules() {
		if s.Name == r.Schedule.Name && !s.Created.After(r.Created) && (s.Deleted.IsZero() || r.Created.Before(s.Deleted)) {
			ep = &s
		}
	}
	if ep == nil {
		return "", nil
	}
	pol := ep.Overlap
	for _, a := range c.Ledger.Acks() {
		switch {
		case a.Kind == KindTrigger && a.Acked && a.NewRun == r.ID && a.Overlap != "":
			pol = a.Overlap
		case a.Kind == KindBackfill && a.Acked && a.Overlap != "" && strings.HasPrefix(r.ID, r.Schedule.Name+"-b"+a.ID+"-"):
			pol = a.Overlap
		}
	}
	if pol == "" {
		pol = "skip"
	}
	return pol, ep
}

// chainUntil returns when the chain of continuations starting at r stopped being live (zero
// while it is live).
func (c *Checker) chainUntil(r *Run) time.Time {
	for r.Successor != "" {
		next := c.latest(r.Successor)
		if next == nil {
			return time.Time{} // the successor is not started yet: live
		}
		r = next
	}
	if !r.Ended() {
		return time.Time{}
	}
	return r.Until
}

// chainLiveAt reports whether any run of the chain starting at r (its continuations and the
// new runs of the resets that ended its runs, followed through each other) was live at t. A
// reset of a run that had ended (a rerun) does not revive the chain (docs/schedules.md, "Runs
// that go on"): the schedule does not count its new run.
func (c *Checker) chainLiveAt(r *Run, t time.Time) bool {
	seen := map[string]bool{}
	todo := []*Run{r}
	for len(todo) > 0 {
		q := todo[0]
		todo = todo[1:]
		if q == nil || seen[q.Key()] {
			continue
		}
		seen[q.Key()] = true
		if q.LiveAt(t) {
			return true
		}
		if q.Successor != "" {
			todo = append(todo, c.latest(q.Successor))
		}
		for _, l := range q.Resets {
			if l.Terminated {
				todo = append(todo, c.latest(l.NewRunID))
			}
		}
	}
	return false
}

func (c *Checker) overlaps() {
	for _, r := range c.sorted() {
		// A reset's new run goes on with its old run's chain: the schedule did not start it.
		if r.Schedule == nil || r.Started.ContinuedFrom != "" || r.Reset != nil {
			continue
		}
		pol, ep := c.policy(r)
		if ep == nil || pol == "allow_all" {
			continue
		}
		for _, q := range c.sorted() {
			if q == r || q.Schedule == nil || q.Schedule.Name != r.Schedule.Name || q.Started.ContinuedFrom != "" || q.Reset != nil {
				continue
			}
			if q.Created.Before(ep.Created) || !q.Created.Before(r.Created) {
				continue
			}
			if c.chainLiveAt(q, r.Created) {
				until := c.chainUntil(q)
				c.add(InvOverlap, fmt.Sprintf("schedule %s (overlap %s) started run %s (%s) at %s while its run %s (started %s) was live until %s",
					r.Schedule.Name, pol, r.Key(), r.Schedule.Action, r.Created.Format(timeFormat), q.Key(), q.Created.Format(timeFormat),
					formatUntil(until)), q.Key(), r.Key())
			}
		}
	}
}

func formatUntil(t time.Time) string {
	if t.IsZero() {
		return "now"
	}
	return t.Format(timeFormat)
}

func (c *Checker) oneLive() {
	fams := map[string][]*Run{}
	for _, r := range c.sorted() {
		if r.Started != nil && r.Started.Parent == nil {
			fams[Family(r.ID)] = append(fams[Family(r.ID)], r)
		}
	}
	for fam, runs := range fams {
		for _, r := range runs {
			var live []string
			for _, o := range runs {
				if o.LiveAt(r.Created) {
					live = append(live, o.Key())
				}
			}
			if len(live) > 1 {
				c.add(InvOneLive, fmt.Sprintf("workflow %s had %d live runs when run %s was created at %s: %s",
					fam, len(live), r.Key(), r.Created.Format(timeFormat), c.describeLive(live)), live...)
			}
		}
	}
}

func (c *Checker) describeLive(keys []string) string {
	var parts []string
	for _, k := range keys {
		r := c.Runs[k]
		s := fmt.Sprintf("%s created %s", k, r.Created.Format(timeFormat))
		if r.Reset != nil {
			s += fmt.Sprintf(" by a reset of %s", r.Reset.RunID)
		}
		if r.Ended() {
			s += fmt.Sprintf(", live until %s", r.Until.Format(timeFormat))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func (c *Checker) index() {
	if c.State.Index == nil {
		return // not read
	}
	for _, r := range c.sorted() {
		if r.Started == nil || c.latest(r.ID) != r || r.Tombstone != nil {
			continue
		}
		e, ok := c.State.Index[r.ID]
		switch {
		case !ok:
			c.add(InvIndex, fmt.Sprintf("run %s has no runs index entry", r.Key()), r.Key())
		case e.Deleted != nil:
			// A tombstone over a run that started again after its deletion.
			c.add(InvIndex, fmt.Sprintf("run %s (started again after a deletion) is indexed as deleted at %s", r.Key(), e.Deleted.At.Format(timeFormat)), r.Key())
		case slices.Contains(endedStatuses, e.Status) != r.Ended():
			c.add(InvIndex, fmt.Sprintf("run %s is indexed %s at seq %d; its history has %d events and ended: %v", r.Key(), e.Status, e.Seq, r.Last(), r.Ended()), r.Key())
		}
	}
}

var endedStatuses = []string{"completed", "failed", "cancelled", "continued_as_new"}

// Describe returns, for each run named by the violations, its events (with the time each
// commit was stored) and the derived state the buckets hold for it: the material of a
// diagnosis.
func (c *Checker) Describe(vs []Violation) string {
	var keys []string
	for _, v := range vs {
		for _, k := range v.Runs {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		r := c.Runs[k]
		if r == nil {
			r = c.latest(k)
		}
		if r == nil {
			fmt.Fprintf(&b, "run %s: no history\n", k)
			continue
		}
		fmt.Fprintf(&b, "run %s (definition %s, created %s", r.Key(), r.Def, r.Created.Format(timeFormat))
		if r.Control != nil {
			fmt.Fprintf(&b, ", control %s", r.Control.Describe())
		}
		if r.Tombstone != nil {
			fmt.Fprintf(&b, ", deleted at %s, purged %v, archive %q", r.Tombstone.At.Format(timeFormat), r.Tombstone.Purged, r.Tombstone.Archive)
		}
		b.WriteString("):\n")
		for _, e := range r.Events {
			stored := "(from the archive)"
			if t, ok := r.Stored[e.Seq]; ok {
				stored = "stored " + t.Format(timeFormat)
			}
			p, _ := json.Marshal(e.Payload)
			if len(p) > 160 {
				p = append(p[:157], "..."...)
			}
			fmt.Fprintf(&b, "  %3d %s %s %-22s %s\n", e.Seq, e.Time.Format(timeFormat), stored, e.Type(), p)
		}
		if e, ok := c.State.Index[r.ID]; ok {
			fmt.Fprintf(&b, "  index: %s at seq %d", e.Status, e.Seq)
			if e.Deleted != nil {
				b.WriteString(" (tombstone)")
			}
			b.WriteString("\n")
		}
		for group, holders := range c.State.Holders {
			if key, ok := holders[r.ID]; ok {
				fmt.Fprintf(&b, "  holds a slot of %s (key %q)\n", group, key)
			}
			if r.Control != nil && strings.HasSuffix(group, "."+r.Control.Group) {
				fmt.Fprintf(&b, "  %s holders: %v\n", group, holders)
			}
		}
		if c.State.Queue[r.ID] {
			b.WriteString("  listed in FLOW_QUEUE\n")
		}
		if ts := c.State.Timers[r.ID]; len(ts) > 0 {
			fmt.Fprintf(&b, "  timers: %v\n", ts)
		}
	}
	return b.String()
}
