package schedule

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// world is a virtual clock and the runs the schedule started: what a round reads of runs and
// what its effects do.
type world struct {
	t    *testing.T
	now  time.Time
	runs map[string]RunState
	// next maps a run that continued as new or was reset to the run its chain went on in.
	next map[string]string
	// deleted holds the runs retention deleted: state finds nothing of them.
	deleted    map[string]bool
	started    []string
	refs       map[string]event.ScheduleRef
	cancelled  []string
	terminated []string
	s          *Schedule
	tm         *Timing
}

func newWorld(t *testing.T, s Schedule, now string) *world {
	t.Helper()
	w := &world{t: t, now: utc(now), runs: map[string]RunState{}, next: map[string]string{}, deleted: map[string]bool{}, refs: map[string]event.ScheduleRef{}}
	var err error
	if w.s, w.tm, err = New(s, w.now); err != nil {
		t.Fatal(err)
	}
	return w
}

// state follows the chain from run id, as the scheduler does; a deleted run is missing.
func (w *world) state(id string) Run {
	if w.deleted[id] {
		return Run{State: RunMissing}
	}
	for w.next[id] != "" {
		id = w.next[id]
	}
	return Run{State: w.runs[id], Latest: id}
}

// exec executes effects as the scheduler does.
func (w *world) exec(effects []Effect) {
	for _, e := range effects {
		switch e.Kind {
		case StartRun:
			if w.runs[e.RunID] == RunMissing {
				w.runs[e.RunID] = RunActive
				w.started = append(w.started, e.RunID)
				w.refs[e.RunID] = e.Ref
			} else {
				w.t.Fatalf("effect starts run %s, which exists: a slot would run twice", e.RunID)
			}
		case CancelRun:
			w.cancelled = append(w.cancelled, e.RunID)
		case TerminateRun:
			w.runs[e.RunID] = RunEnded
			w.terminated = append(w.terminated, e.RunID)
		}
	}
}

// at moves the clock to now and runs rounds until nothing more is due.
func (w *world) at(now string) {
	w.t.Helper()
	w.now = utc(now)
	w.round()
}

func (w *world) round() {
	for range 100 {
		effects, _ := w.s.Round(w.tm, w.now, w.state)
		w.exec(effects)
		if _, now, _ := w.s.Wake(w.tm, w.now); !now {
			return
		}
	}
	w.t.Fatal("rounds never settle")
}

func (w *world) end(id string) {
	w.t.Helper()
	if w.runs[id] != RunActive {
		w.t.Fatalf("run %s is not active", id)
	}
	w.runs[id] = RunEnded
}

// outcomes returns the recent actions as "slot-minute:outcome" (slot time HH:MM in UTC).
func (w *world) outcomes() string {
	var out []string
	for _, a := range w.s.State.Recent {
		s := a.Slot.Format("15:04") + ":" + string(a.Outcome)
		if a.Count > 1 {
			s += fmt.Sprintf("x%d", a.Count)
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func (w *world) wantStarted(ids ...string) {
	w.t.Helper()
	if !slices.Equal(w.started, ids) {
		w.t.Fatalf("started %v, want %v (recent: %s)", w.started, ids, w.outcomes())
	}
}

func minutely(overlap Overlap) Schedule {
	return Schedule{Name: "r", Definition: "report", Spec: Spec{Every: event.Duration(time.Minute)}, Overlap: overlap}
}

func id(hhmm string) string { return "r-20260601T" + strings.ReplaceAll(hhmm, ":", "") + "00Z" }

// TestOverlapPolicies drives a schedule that fires every minute, whose runs outlast a minute,
// through each overlap policy on a virtual clock.
func TestOverlapPolicies(t *testing.T) {
	t.Run("skip", func(t *testing.T) {
		w := newWorld(t, minutely(Skip), "2026-06-01T10:00:30Z")
		w.at("2026-06-01T10:01:00Z")
		w.at("2026-06-01T10:02:00Z") // 10:01's run is active
		w.end(id("10:01"))
		w.at("2026-06-01T10:03:00Z")
		w.wantStarted(id("10:01"), id("10:03"))
		if got := w.outcomes(); got != "10:01:started 10:02:skipped 10:03:started" {
			t.Fatal(got)
		}
	})
	t.Run("buffer_one", func(t *testing.T) {
		w := newWorld(t, minutely(BufferOne), "2026-06-01T10:00:30Z")
		w.at("2026-06-01T10:01:00Z")
		w.at("2026-06-01T10:02:00Z")
		w.at("2026-06-01T10:03:00Z") // one buffered already: skipped
		w.wantStarted(id("10:01"))
		w.end(id("10:01"))
		w.at("2026-06-01T10:03:10Z") // a poll: 10:02 starts
		w.wantStarted(id("10:01"), id("10:02"))
		if got := w.outcomes(); got != "10:01:started 10:02:buffered 10:03:skipped 10:02:started" {
			t.Fatal(got)
		}
	})
	t.Run("buffer_all", func(t *testing.T) {
		w := newWorld(t, minutely(BufferAll), "2026-06-01T10:00:30Z")
		w.at("2026-06-01T10:01:00Z")
		w.at("2026-06-01T10:02:00Z")
		w.at("2026-06-01T10:03:00Z")
		w.end(id("10:01"))
		w.at("2026-06-01T10:03:10Z")
		w.wantStarted(id("10:01"), id("10:02")) // one at a time
		w.end(id("10:02"))
		w.at("2026-06-01T10:03:20Z")
		w.wantStarted(id("10:01"), id("10:02"), id("10:03"))
		if len(w.s.State.Buffered) != 0 {
			t.Fatalf("buffered left: %v", w.s.State.Buffered)
		}
	})
	t.Run("cancel_other", func(t *testing.T) {
		w := newWorld(t, minutely(CancelOther), "2026-06-01T10:00:30Z")
		w.at("2026-06-01T10:01:00Z")
		w.at("2026-06-01T10:02:00Z") // cancels 10:01's run; 10:02 waits for it to end
		if !slices.Equal(w.cancelled, []string{id("10:01")}) {
			t.Fatalf("cancelled %v", w.cancelled)
		}
		w.at("2026-06-01T10:03:00Z") // still cancelling: 10:03 replaces 10:02, no second cancel
		if len(w.cancelled) != 1 {
			t.Fatalf("cancelled %v: want one request", w.cancelled)
		}
		w.end(id("10:01"))
		w.at("2026-06-01T10:03:10Z")
		w.wantStarted(id("10:01"), id("10:03"))
		if got := w.outcomes(); got != "10:01:started 10:02:buffered 10:02:skipped 10:03:buffered 10:03:started" {
			t.Fatal(got)
		}
	})
	t.Run("terminate_other", func(t *testing.T) {
		w := newWorld(t, minutely(TerminateOther), "2026-06-01T10:00:30Z")
		w.at("2026-06-01T10:01:00Z")
		effects, _ := w.s.Round(w.tm, utc("2026-06-01T10:02:00Z"), w.state)
		if len(effects) != 2 || effects[0].Kind != TerminateRun || effects[0].RunID != id("10:01") || effects[1].Kind != StartRun || effects[1].RunID != id("10:02") {
			t.Fatalf("effects %+v: want terminate 10:01, then start 10:02", effects)
		}
		w.exec(effects)
		w.wantStarted(id("10:01"), id("10:02"))
		if !slices.Equal(w.s.State.Running, []string{id("10:02")}) {
			t.Fatalf("running %v", w.s.State.Running)
		}
	})
	t.Run("allow_all", func(t *testing.T) {
		w := newWorld(t, minutely(AllowAll), "2026-06-01T10:00:30Z")
		w.at("2026-06-01T10:01:00Z")
		w.at("2026-06-01T10:02:00Z")
		w.at("2026-06-01T10:03:00Z")
		w.wantStarted(id("10:01"), id("10:02"), id("10:03"))
		if len(w.s.State.Running) != 3 {
			t.Fatalf("running %v", w.s.State.Running)
		}
		w.end(id("10:02"))
		w.at("2026-06-01T10:03:30Z")
		if !slices.Equal(w.s.State.Running, []string{id("10:01"), id("10:03")}) {
			t.Fatalf("running %v", w.s.State.Running)
		}
	})
}

// TestCatchup: the scheduler was down for half an hour; the slots due longer ago than the
// catch-up window (5m) are recorded as missed, the others are started.
func TestCatchup(t *testing.T) {
	s := minutely(AllowAll)
	s.CatchupWindow = event.Duration(5 * time.Minute)
	w := newWorld(t, s, "2026-06-01T10:00:30Z")
	w.at("2026-06-01T10:30:00Z")
	w.wantStarted(id("10:25"), id("10:26"), id("10:27"), id("10:28"), id("10:29"), id("10:30"))
	if got := w.outcomes(); !strings.HasPrefix(got, "10:01:missedx24 10:25:started") {
		t.Fatal(got)
	}
	if w.s.State.Missed != 24 || w.s.State.Recent[0].Until.Format("15:04") != "10:24" {
		t.Fatalf("missed %d, until %s", w.s.State.Missed, w.s.State.Recent[0].Until)
	}
	// A long downtime takes several bounded rounds and starts nothing old.
	w.at("2026-06-02T10:30:00Z")
	if w.s.State.Missed != 24+1440-6 || len(w.started) != 12 {
		t.Fatalf("missed %d, started %d", w.s.State.Missed, len(w.started))
	}
}

// TestBackfill starts the slots of a past range under the backfill's overlap policy, with IDs
// of its own, once however often it is asked for.
func TestBackfill(t *testing.T) {
	hourly := Schedule{Name: "r", Definition: "report", Spec: Spec{Cron: "0 * * * *", TZ: "Europe/Berlin"}, Overlap: Skip}
	w := newWorld(t, hourly, "2026-06-01T10:00:30Z")
	ok, err := w.s.Backfill(w.tm, "q1", utc("2026-06-01T05:00:00Z"), utc("2026-06-01T08:00:00Z"), BufferAll, w.now)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ok, err := w.s.Backfill(w.tm, "q1", utc("2026-06-01T05:00:00Z"), utc("2026-06-01T08:00:00Z"), BufferAll, w.now); ok || err != nil {
		t.Fatalf("a repeated backfill request was taken again: %v %v", ok, err)
	}
	w.round()
	w.wantStarted("r-bq1-20260601T050000Z")
	w.end("r-bq1-20260601T050000Z")
	w.at("2026-06-01T10:00:40Z")
	w.end("r-bq1-20260601T060000Z")
	w.at("2026-06-01T10:00:50Z")
	w.wantStarted("r-bq1-20260601T050000Z", "r-bq1-20260601T060000Z", "r-bq1-20260601T070000Z")
	if ref := w.refs["r-bq1-20260601T060000Z"]; ref != (event.ScheduleRef{Name: "r", Slot: utc("2026-06-01T06:00:00Z"), Action: event.ScheduleBackfill}) {
		t.Fatalf("ref %+v", ref)
	}
	// The schedule's own policy (skip) applies to its next slot: a backfilled run is active.
	w.at("2026-06-01T11:00:00Z")
	if got := w.s.State.Recent[len(w.s.State.Recent)-1]; got.Outcome != Skipped || got.Kind != event.ScheduleScheduled {
		t.Fatalf("11:00: %+v", got)
	}
	for _, bad := range []struct{ start, end string }{{"2026-06-01T08:00:00Z", "2026-06-01T05:00:00Z"}, {"2026-06-01T09:00:00Z", "2026-06-02T09:00:00Z"}, {"2026-06-01T05:10:00Z", "2026-06-01T05:20:00Z"}} {
		if _, err := w.s.Backfill(w.tm, "q2", utc(bad.start), utc(bad.end), "", w.now); err == nil {
			t.Errorf("backfill %s..%s accepted", bad.start, bad.end)
		}
	}
	// A long backfill goes in bounded rounds.
	m := newWorld(t, minutely(AllowAll), "2026-06-02T00:00:30Z")
	if _, err := m.s.Backfill(m.tm, "big", utc("2026-06-01T00:00:00Z"), utc("2026-06-02T00:00:00Z"), "", m.now); err != nil {
		t.Fatal(err)
	}
	effects, _ := m.s.Round(m.tm, m.now, m.state)
	if len(effects) != MaxSlotsPerRound {
		t.Fatalf("first round: %d effects", len(effects))
	}
	m.exec(effects)
	m.round()
	if len(m.started) != 1440 || len(m.s.State.Requests) != 0 {
		t.Fatalf("started %d, requests left %d", len(m.started), len(m.s.State.Requests))
	}
}

// TestPause: slots that come while paused are recorded, not started, and not caught up after
// unpause; a trigger acts while paused.
func TestPause(t *testing.T) {
	w := newWorld(t, minutely(AllowAll), "2026-06-01T10:00:30Z")
	if err := w.s.Pause("maintenance", w.now); err != nil {
		t.Fatal(err)
	}
	w.at("2026-06-01T10:02:00Z")
	w.wantStarted()
	if len(w.s.NextActions(w.tm, w.now, 3)) != 0 {
		t.Fatal("a paused schedule lists next actions")
	}
	if ok, _ := w.s.Trigger("t1", "", w.now.Add(time.Second)); !ok {
		t.Fatal("trigger refused")
	}
	if ok, _ := w.s.Trigger("t1", "", w.now.Add(2*time.Second)); ok {
		t.Fatal("a repeated trigger was taken")
	}
	w.at("2026-06-01T10:02:01Z")
	w.wantStarted(RunID("r", event.ScheduleTrigger, utc("2026-06-01T10:02:01Z"), "t1"))
	if ref := w.refs[RunID("r", event.ScheduleTrigger, utc("2026-06-01T10:02:01Z"), "t1")]; ref.Action != event.ScheduleTrigger || !ref.Slot.Equal(utc("2026-06-01T10:02:01Z")) {
		t.Fatalf("trigger ref %+v", ref)
	}
	// No round while it stays paused until 10:05:30: unpause records 10:03..10:05 as paused.
	w.now = utc("2026-06-01T10:05:30Z")
	if err := w.s.Unpause(w.tm, "done", w.now); err != nil {
		t.Fatal(err)
	}
	w.at("2026-06-01T10:06:00Z")
	w.wantStarted(RunID("r", event.ScheduleTrigger, utc("2026-06-01T10:02:01Z"), "t1"), id("10:06"))
	if got := w.outcomes(); got != "10:01:pausedx2 10:02:started 10:03:pausedx3 10:06:started" {
		t.Fatal(got)
	}
	if w.s.State.Paused || w.s.State.Note != "done" {
		t.Fatalf("state %+v", w.s.State)
	}
	next := w.s.NextActions(w.tm, w.now, 2)
	if len(next) != 2 || !next[0].Slot.Equal(utc("2026-06-01T10:07:00Z")) {
		t.Fatalf("next %+v", next)
	}
}

// TestCrashBetweenStartAndStore: a round's effects are executed and its state is lost (the
// scheduler died before storing it); the round again, from the stored state, finds each run
// started and starts none twice (world.exec fails the test on a second start).
func TestCrashBetweenStartAndStore(t *testing.T) {
	for _, policy := range Overlaps {
		t.Run(string(policy), func(t *testing.T) {
			w := newWorld(t, minutely(policy), "2026-06-01T10:00:30Z")
			w.at("2026-06-01T10:01:00Z")
			stored, _ := json.Marshal(w.s)
			w.now = utc("2026-06-01T10:02:00Z")
			effects, _ := w.s.Round(w.tm, w.now, w.state)
			w.exec(effects) // the effects happen; the state is not stored
			var back Schedule
			if err := json.Unmarshal(stored, &back); err != nil {
				t.Fatal(err)
			}
			w.s = &back
			w.round()
			counts := map[string]int{}
			for _, id := range w.started {
				counts[id]++
			}
			for id, n := range counts {
				if n != 1 {
					t.Fatalf("run %s started %d times", id, n)
				}
			}
			if policy == AllowAll || policy == TerminateOther {
				w.wantStarted(id("10:01"), id("10:02"))
				if w.s.State.Started != 2 {
					t.Fatalf("started count %d", w.s.State.Started)
				}
			}
		})
	}
}

// TestDSTRounds drives a daily 02:30 Europe/Berlin schedule minute by minute across both DST
// changes of 2026: one run each day.
func TestDSTRounds(t *testing.T) {
	for _, days := range [][2]string{{"2026-03-27T00:00:00Z", "2026-03-31T00:00:00Z"}, {"2026-10-23T00:00:00Z", "2026-10-27T00:00:00Z"}} {
		s := Schedule{Name: "r", Definition: "report", Spec: Spec{Cron: "30 2 * * *", TZ: "Europe/Berlin"}, Overlap: AllowAll}
		w := newWorld(t, s, days[0])
		for now := utc(days[0]); now.Before(utc(days[1])); now = now.Add(time.Minute) {
			w.now = now
			w.round()
		}
		perDay := map[string]int{}
		berlin := w.tm.Location()
		for _, id := range w.started {
			perDay[w.refs[id].Slot.In(berlin).Format("2006-01-02")]++
		}
		if len(perDay) != 4 {
			t.Fatalf("%v: runs per day %v", days, perDay)
		}
		for d, n := range perDay {
			if n != 1 {
				t.Fatalf("%s: %d runs", d, n)
			}
		}
	}
}

func TestStartFailed(t *testing.T) {
	w := newWorld(t, minutely(Skip), "2026-06-01T10:00:30Z")
	effects, _ := w.s.Round(w.tm, utc("2026-06-01T10:01:00Z"), w.state)
	if len(effects) != 1 {
		t.Fatal(effects)
	}
	w.s.StartFailed(effects[0].RunID, "run exists with a different input", w.now)
	if len(w.s.State.Running) != 0 || w.s.State.Failed != 1 || w.s.State.Started != 0 || w.s.State.Recent[0].Outcome != Failed {
		t.Fatalf("state %+v", w.s.State)
	}
}

// TestPauseHoldsBuffered: a slot buffered before the pause waits for the unpause; a trigger
// still acts while paused.
func TestPauseHoldsBuffered(t *testing.T) {
	w := newWorld(t, minutely(BufferOne), "2026-06-01T10:00:30Z")
	w.at("2026-06-01T10:01:00Z")
	w.at("2026-06-01T10:02:00Z") // buffered behind 10:01's run
	if err := w.s.Pause("hold", w.now); err != nil {
		t.Fatal(err)
	}
	w.end(id("10:01"))
	w.at("2026-06-01T10:02:30Z")
	w.wantStarted(id("10:01"))
	if _, err := w.s.Trigger("t1", AllowAll, w.now); err != nil {
		t.Fatal(err)
	}
	w.round()
	w.wantStarted(id("10:01"), RunID("r", event.ScheduleTrigger, utc("2026-06-01T10:02:30Z"), "t1"))
	w.end(RunID("r", event.ScheduleTrigger, utc("2026-06-01T10:02:30Z"), "t1"))
	if err := w.s.Unpause(w.tm, "", utc("2026-06-01T10:02:40Z")); err != nil {
		t.Fatal(err)
	}
	w.at("2026-06-01T10:02:40Z")
	w.wantStarted(id("10:01"), RunID("r", event.ScheduleTrigger, utc("2026-06-01T10:02:30Z"), "t1"), id("10:02"))
}

// TestCrashAfterATriggerStartedBeforeASlot: a round starts a trigger's run and dies before
// storing the state; the next round, from the stored state, finds a scheduled slot due as well.
// The trigger's run is running: the slot's action waits for it (buffer_all), or is skipped,
// rather than starting beside it because the slots come first in a round. Found by the torture
// test (a scheduler killed by a fault between the start and the store).
func TestCrashAfterATriggerStartedBeforeASlot(t *testing.T) {
	for _, policy := range []Overlap{Skip, BufferOne, BufferAll, CancelOther} {
		t.Run(string(policy), func(t *testing.T) {
			w := newWorld(t, minutely(policy), "2026-06-01T10:00:10Z")
			w.round()
			at := utc("2026-06-01T10:00:30Z")
			if _, err := w.s.Trigger("t1", "", at); err != nil {
				t.Fatal(err)
			}
			stored, _ := json.Marshal(w.s)
			w.now = utc("2026-06-01T10:00:40Z")
			effects, _ := w.s.Round(w.tm, w.now, w.state)
			w.exec(effects) // the trigger's run starts; the state is not stored
			trigger := RunID("r", event.ScheduleTrigger, at, "t1")
			w.wantStarted(trigger)
			var back Schedule
			if err := json.Unmarshal(stored, &back); err != nil {
				t.Fatal(err)
			}
			w.s = &back
			w.at("2026-06-01T10:01:00Z")
			w.wantStarted(trigger)
			if !slices.Contains(w.s.State.Running, trigger) {
				t.Fatalf("running %v: the trigger's run is not counted", w.s.State.Running)
			}
			if policy == CancelOther && !slices.Contains(w.cancelled, trigger) {
				t.Fatalf("cancel_other did not cancel %s: %v", trigger, w.cancelled)
			}
			w.end(trigger)
			w.at("2026-06-01T10:01:30Z")
			if policy == Skip {
				w.wantStarted(trigger)
				return
			}
			w.wantStarted(trigger, id("10:01"))
		})
	}
}

// TestCrashAfterABufferedSlotStartedThenPaused is torture finding N7 on the virtual clock: a
// round starts the run of a slot buffered behind a run that ended, and its state is lost (the
// scheduler died, or a pause won the compare-and-set); the schedule is paused before the next
// round, which therefore does not drain the buffered slot. Its run is live all the same: it
// counts as running (a trigger waits for it, or cancel_other cancels it) and is recorded as
// the slot's run, started once.
func TestCrashAfterABufferedSlotStartedThenPaused(t *testing.T) {
	for _, policy := range []Overlap{BufferOne, BufferAll, CancelOther} {
		t.Run(string(policy), func(t *testing.T) {
			w := newWorld(t, minutely(policy), "2026-06-01T10:00:30Z")
			w.at("2026-06-01T10:01:00Z")
			w.at("2026-06-01T10:02:00Z") // buffered behind 10:01's run
			w.end(id("10:01"))
			stored, _ := json.Marshal(w.s)
			w.now = utc("2026-06-01T10:02:30Z")
			effects, _ := w.s.Round(w.tm, w.now, w.state)
			w.exec(effects) // 10:02's run starts; the state is not stored
			w.wantStarted(id("10:01"), id("10:02"))
			var back Schedule
			if err := json.Unmarshal(stored, &back); err != nil {
				t.Fatal(err)
			}
			w.s = &back
			if err := w.s.Pause("", w.now); err != nil {
				t.Fatal(err)
			}
			at := utc("2026-06-01T10:02:40Z")
			if _, err := w.s.Trigger("t1", "", at); err != nil {
				t.Fatal(err)
			}
			w.at("2026-06-01T10:02:40Z")
			w.wantStarted(id("10:01"), id("10:02"))
			if !slices.Contains(w.s.State.Running, id("10:02")) {
				t.Fatalf("running %v: 10:02's run is not counted", w.s.State.Running)
			}
			if policy == CancelOther && !slices.Contains(w.cancelled, id("10:02")) {
				t.Fatalf("cancel_other did not cancel %s: %v", id("10:02"), w.cancelled)
			}
			trigger := RunID("r", event.ScheduleTrigger, at, "t1")
			w.end(id("10:02"))
			w.at("2026-06-01T10:02:50Z")
			w.wantStarted(id("10:01"), id("10:02"), trigger)
			// 10:01 started, 10:02 buffered and started (found by the round after the pause), the
			// trigger (at 10:02:40) buffered behind it and started.
			if got := w.outcomes(); got != "10:01:started 10:02:buffered 10:02:started 10:02:buffered 10:02:started" {
				t.Fatalf("recent: %s", got)
			}
		})
	}
}
