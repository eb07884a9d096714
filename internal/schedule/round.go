package schedule

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// RunState is what a round needs to know of a run: whether it exists and its chain is active.
// A run goes on as a chain: when it continues as new, in its successor; when it is reset, in
// the new run of the reset (which ends it). The chain is active until its latest run ends.
type RunState int

const (
	// RunMissing: the run was never started (and was not deleted by retention either).
	RunMissing RunState = iota
	// RunActive: the chain's latest run has not ended.
	RunActive
	// RunEnded: the chain's latest run ended, with no successor and no reset.
	RunEnded
)

// Run is what a round learns of the chain that goes on from a run.
type Run struct {
	State RunState
	// Latest is the chain's latest run known to exist: the run itself unless it continued as
	// new or was reset ("" stands for the run itself).
	Latest string
}

// Runs tells the state of the chain that goes on from run runID, following its continuations
// and resets. The scheduler reads it from the runs' histories, and from the tombstones
// retention leaves in the runs index for deleted ones; tests give a map.
type Runs func(runID string) Run

// EffectKind is what an Effect does.
type EffectKind string

const (
	// StartRun starts run RunID for Ref at expected sequence 0: if it exists (a repeat after a
	// crash), the existing run is the slot's run.
	StartRun EffectKind = "start"
	// CancelRun requests the cancellation of run RunID (CancelOther).
	CancelRun EffectKind = "cancel"
	// TerminateRun terminates run RunID (TerminateOther).
	TerminateRun EffectKind = "terminate"
)

// Effect is one write a round asks for. Every effect is idempotent: executing it again after a
// crash changes nothing.
type Effect struct {
	Kind   EffectKind
	RunID  string
	Ref    event.ScheduleRef
	Reason string
}

// MaxSlotsPerRound bounds the slots (scheduled or backfilled) one round deals with, so that a
// round after a long downtime, or of a long backfill, stays short; the next round goes on at
// once (Wake says so).
const MaxSlotsPerRound = 256

// Round advances s to time now: it deals with the buffered actions whose turn came, every slot
// whose fire time has passed, and the pending triggers and backfills, applying the pause, the
// catch-up window and the overlap policy. It returns the effects to execute, in order, before
// s is stored, and whether s changed. A crash after some effects and before the store is
// harmless: the next round, from the stored state, finds the started runs (runs reports them
// existing), records them as started, and executes the cancellations and terminations again,
// which change nothing the second time.
func (s *Schedule) Round(t *Timing, now time.Time, runs Runs) (effects []Effect, changed bool) {
	r := &round{s: s, t: t, now: now.UTC(), from: runs}
	r.runs = r.read
	st := &s.State
	if st.Cursor.IsZero() {
		st.Cursor = s.CreatedAt
		r.changed = true
	}
	// The runs whose chains ended are no longer running; the others' chains are read on from
	// their latest runs known.
	running := st.Running[:0:0]
	var current map[string]string
	for _, id := range st.Running {
		run := runs(st.CurrentRun(id))
		if run.State != RunActive {
			continue
		}
		running = append(running, id)
		if latest := cmp.Or(run.Latest, st.CurrentRun(id)); latest != id {
			if current == nil {
				current = map[string]string{}
			}
			current[id] = latest
		}
	}
	if len(running) != len(st.Running) {
		st.Running = running
		st.Cancelling = slices.DeleteFunc(st.Cancelling, func(id string) bool { return !slices.Contains(running, id) })
		r.changed = true
	}
	if !maps.Equal(current, st.Current) {
		st.Current = current
		r.changed = true
	}
	r.adopt()
	r.drain()
	budget := MaxSlotsPerRound
	for budget > 0 {
		slot := t.Next(st.Cursor)
		if slot.IsZero() || t.FireAt(s.Name, slot).After(r.now) {
			break
		}
		budget--
		st.Cursor = slot
		r.changed = true
		p := Pending{Slot: slot, Kind: event.ScheduleScheduled, RunID: RunID(s.Name, event.ScheduleScheduled, slot, "")}
		switch {
		case r.already(p):
		case st.Paused:
			r.recordRun(p, Paused, "")
		case r.now.Sub(t.FireAt(s.Name, slot)) > s.catchup():
			r.recordRun(p, Missed, "")
		default:
			r.act(p)
		}
	}
	for len(st.Requests) > 0 && budget > 0 {
		req := &st.Requests[0]
		r.changed = true
		if req.Kind == event.ScheduleTrigger {
			budget--
			p := Pending{Slot: req.At, Kind: event.ScheduleTrigger, RunID: RunID(s.Name, event.ScheduleTrigger, req.At, req.ID), Overlap: req.Overlap}
			if !r.already(p) {
				r.act(p)
			}
			st.Requests = st.Requests[1:]
			continue
		}
		from := req.Done
		if from.IsZero() {
			from = req.Start.Add(-time.Nanosecond)
		}
		for budget > 0 {
			slot := t.Next(from)
			if slot.IsZero() || !slot.Before(req.End) {
				st.Requests = st.Requests[1:]
				break
			}
			budget--
			req.Done, from = slot, slot
			p := Pending{Slot: slot, Kind: event.ScheduleBackfill, RunID: RunID(s.Name, event.ScheduleBackfill, slot, req.ID), Overlap: req.Overlap}
			if !r.already(p) {
				r.act(p)
			}
		}
	}
	if len(st.Requests) == 0 {
		st.Requests = nil
	}
	if r.changed {
		st.UpdatedAt = r.now
	}
	return r.effects, r.changed
}

// Wake returns when s needs its next round: the fire time of its next slot (zero if none),
// and now or poll when it must look earlier. now is set when triggers or backfills wait, or a
// round stopped at MaxSlotsPerRound; poll while runs it started are active or buffered actions
// wait for them to end: the scheduler then runs a round every poll interval, so that a run
// that ended leaves Running, and the action buffered behind it starts, within that interval
// rather than at the next slot.
func (s *Schedule) Wake(t *Timing, now time.Time) (at time.Time, immediately, poll bool) {
	st := &s.State
	cursor := st.Cursor
	if cursor.IsZero() {
		cursor = s.CreatedAt
	}
	if slot := t.Next(cursor); !slot.IsZero() {
		at = t.FireAt(s.Name, slot)
	}
	immediately = len(st.Requests) > 0 || !at.IsZero() && !at.After(now)
	poll = len(st.Buffered) > 0 || len(st.Running) > 0
	return at, immediately, poll
}

// StartFailed records that the start of run runID, which the last round asked for, was
// refused for good (why says why): the schedule goes on without it.
func (s *Schedule) StartFailed(runID, why string, now time.Time) {
	st := &s.State
	st.Running = slices.DeleteFunc(st.Running, func(id string) bool { return id == runID })
	delete(st.Current, runID)
	for i := len(st.Recent) - 1; i >= 0; i-- {
		if a := &st.Recent[i]; a.RunID == runID && a.Outcome == Started {
			a.Outcome, a.Detail = Failed, why
			st.Started--
			st.Failed++
			break
		}
	}
	st.UpdatedAt = now.UTC()
}

// NextActions returns the fire times of s's next n scheduled slots after now (none while
// paused), with the slots they are for.
func (s *Schedule) NextActions(t *Timing, now time.Time, n int) []Action {
	if s.State.Paused {
		return nil
	}
	from := s.State.Cursor
	if from.IsZero() {
		from = s.CreatedAt
	}
	var out []Action
	for len(out) < n {
		slot := t.Next(from)
		if slot.IsZero() {
			break
		}
		from = slot
		if fire := t.FireAt(s.Name, slot); !fire.Before(now) || len(out) > 0 {
			out = append(out, Action{Slot: slot, Kind: event.ScheduleScheduled, At: fire,
				RunID: RunID(s.Name, event.ScheduleScheduled, slot, "")})
		}
	}
	return out
}

type round struct {
	s       *Schedule
	t       *Timing
	now     time.Time
	runs    Runs
	effects []Effect
	changed bool
	// seen holds what the round read of each run (from reads it): one read a run.
	seen map[string]Run
	from Runs
}

// read reads the chain of run id once a round.
func (r *round) read(id string) Run {
	if run, ok := r.seen[id]; ok {
		return run
	}
	if r.seen == nil {
		r.seen = map[string]Run{}
	}
	run := r.from(id)
	r.seen[id] = run
	return run
}

// adopt counts as running, before the round decides anything, the live runs of the actions it
// is about to deal with: those a round that died before storing the state started (the
// scheduled slots due, the pending triggers, the next slots of the pending backfills), so that
// no action of this round is decided as if they were not running. Each is recorded as started
// when the round comes to it (already).
//
// The buffered actions whose runs exist are taken out of the buffer first, recorded as started:
// such a round drained them (drain). This round may not come to them (a paused schedule does
// not drain a buffered slot; a pause is what made that round's store lose its compare-and-set
// in torture finding N7), and a buffered action's live run must count as running all the same.
// Drain goes in order, so only a prefix of the buffer can have started.
func (r *round) adopt() {
	st := &r.s.State
	for len(st.Buffered) > 0 && r.runs(st.Buffered[0].RunID).State != RunMissing {
		p := st.Buffered[0]
		st.Buffered = st.Buffered[1:]
		r.already(p)
	}
	if len(st.Buffered) == 0 {
		st.Buffered = nil
	}
	add := func(id string) {
		run := r.runs(id)
		if run.State != RunActive || slices.Contains(st.Running, id) {
			return
		}
		st.Running = append(st.Running, id)
		if run.Latest != "" && run.Latest != id {
			if st.Current == nil {
				st.Current = map[string]string{}
			}
			st.Current[id] = run.Latest
		}
		r.changed = true
	}
	budget := MaxSlotsPerRound
	for cursor := st.Cursor; budget > 0; budget-- {
		slot := r.t.Next(cursor)
		if slot.IsZero() || r.t.FireAt(r.s.Name, slot).After(r.now) {
			break
		}
		cursor = slot
		add(RunID(r.s.Name, event.ScheduleScheduled, slot, ""))
	}
	for _, req := range st.Requests {
		if budget <= 0 {
			break
		}
		if req.Kind == event.ScheduleTrigger {
			budget--
			add(RunID(r.s.Name, event.ScheduleTrigger, req.At, req.ID))
			continue
		}
		from := req.Done
		if from.IsZero() {
			from = req.Start.Add(-time.Nanosecond)
		}
		for ; budget > 0; budget-- {
			slot := r.t.Next(from)
			if slot.IsZero() || !slot.Before(req.End) {
				break
			}
			from = slot
			add(RunID(r.s.Name, event.ScheduleBackfill, slot, req.ID))
		}
	}
}

// already reports whether p's run exists (a round that started it died before storing the
// state): it is then recorded as started, and counted as running if it is active.
func (r *round) already(p Pending) bool {
	st := &r.s.State
	run := r.runs(p.RunID)
	switch run.State {
	case RunMissing:
		return false
	case RunActive:
		if !slices.Contains(st.Running, p.RunID) {
			st.Running = append(st.Running, p.RunID)
		}
		if run.Latest != "" && run.Latest != p.RunID {
			if st.Current == nil {
				st.Current = map[string]string{}
			}
			st.Current[p.RunID] = run.Latest
		}
	}
	r.s.State.Started++
	r.recordRun(p, Started, "")
	return true
}

// drain starts the buffered actions whose turn came: while no run is active. A buffered slot
// of a paused schedule waits for the unpause (and so do the actions buffered after it).
func (r *round) drain() {
	st := &r.s.State
	for len(st.Running) == 0 && len(st.Buffered) > 0 {
		p := st.Buffered[0]
		if st.Paused && p.Kind == event.ScheduleScheduled {
			break
		}
		st.Buffered = st.Buffered[1:]
		r.changed = true
		if !r.already(p) {
			r.start(p)
		}
	}
	if len(st.Buffered) == 0 {
		st.Buffered = nil
	}
}

// act applies the overlap policy to action p.
func (r *round) act(p Pending) {
	st := &r.s.State
	policy := p.Overlap.Or(r.s.Overlap).Or(Skip)
	if len(st.Running) == 0 || policy == AllowAll {
		r.start(p)
		return
	}
	switch policy {
	case Skip:
		r.skip(p, "a run of the schedule is active (overlap policy skip)")
	case BufferOne:
		if len(st.Buffered) > 0 {
			r.skip(p, "a run of the schedule is active and another action is buffered (overlap policy buffer_one)")
			return
		}
		r.buffer(p)
	case BufferAll:
		r.buffer(p)
	case CancelOther:
		for _, id := range st.Running {
			if !slices.Contains(st.Cancelling, id) {
				st.Cancelling = append(st.Cancelling, id)
				r.effects = append(r.effects, Effect{Kind: CancelRun, RunID: st.CurrentRun(id),
					Reason: "schedule " + r.s.Name + ": a newer action replaces it (overlap policy cancel_other)"})
			}
		}
		// Only the newest action waits for the cancelled runs to end.
		for _, old := range st.Buffered {
			r.skip(old, "a newer action replaced it while the active run was being cancelled (overlap policy cancel_other)")
		}
		st.Buffered = nil
		r.buffer(p)
	case TerminateOther:
		for _, id := range st.Running {
			r.effects = append(r.effects, Effect{Kind: TerminateRun, RunID: st.CurrentRun(id),
				Reason: "schedule " + r.s.Name + ": a newer action replaces it (overlap policy terminate_other)"})
		}
		st.Running, st.Cancelling, st.Current = nil, nil, nil
		r.start(p)
	}
}

func (r *round) start(p Pending) {
	st := &r.s.State
	r.effects = append(r.effects, Effect{Kind: StartRun, RunID: p.RunID,
		Ref: event.ScheduleRef{Name: r.s.Name, Slot: p.Slot.UTC(), Action: p.Kind}})
	st.Running = append(st.Running, p.RunID)
	st.Started++
	r.recordRun(p, Started, "")
}

func (r *round) skip(p Pending, why string) {
	r.s.State.Skipped++
	r.recordRun(p, Skipped, why)
}

func (r *round) buffer(p Pending) {
	r.s.State.Buffered = append(r.s.State.Buffered, p)
	r.recordRun(p, Buffered, "")
}

// recordRun records what became of p. Consecutive missed or paused slots are one record.
func (r *round) recordRun(p Pending, o Outcome, detail string) {
	st := &r.s.State
	r.changed = true
	a := Action{Slot: p.Slot.UTC(), Kind: p.Kind, RunID: p.RunID, Outcome: o, At: r.now, Detail: detail}
	if o == Missed || o == Paused {
		if o == Missed {
			st.Missed++
		}
		a.RunID = ""
		if n := len(st.Recent); n > 0 && st.Recent[n-1].Outcome == o {
			last := &st.Recent[n-1]
			last.Count = max(last.Count, 1) + 1
			last.Until, last.At = a.Slot, r.now
			return
		}
	}
	st.Recent = append(st.Recent, a)
	if len(st.Recent) > RecentMax {
		st.Recent = slices.Delete(st.Recent, 0, len(st.Recent)-RecentMax)
	}
}
