package torture

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/pkg/event"
)

// The checker's own tests: synthetic histories, as the tap would see them, with and without
// each kind of violation.

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// synth builds the commits of one run, one event per commit, event i at ms[i].
type synth struct {
	run     string
	commits []Commit
}

func hist(run string) *synth { return &synth{run: run} }

func (h *synth) add(ms int, p event.Payload) *synth {
	seq := uint64(1)
	if n := len(h.commits); n > 0 {
		seq = h.commits[n-1].Last + 1
	}
	h.commits = append(h.commits, Commit{At: at(ms), RunID: h.run, First: seq, Last: seq,
		Events: []event.Envelope{{RunID: h.run, Seq: seq, Time: at(ms), Payload: p}}})
	return h
}

func started(def string, ctl *event.FlowControl) *event.RunStarted {
	return &event.RunStarted{Spec: event.Spec{Definition: def}, Input: json.RawMessage(`{"key":"k"}`), Seed: "s", Control: ctl}
}

var keyed1 = &event.FlowControl{Group: "g", Key: "k", KeyConcurrency: 1}

func check(t *testing.T, l *Ledger, st *State, hs ...*synth) []Violation {
	t.Helper()
	var commits []Commit
	for _, h := range hs {
		commits = append(commits, h.commits...)
	}
	slices.SortStableFunc(commits, func(a, b Commit) int { return a.At.Compare(b.At) })
	if st == nil {
		st = &State{}
	}
	if l == nil {
		l = &Ledger{defPaused: map[string]bool{}}
	}
	runs := BuildRuns(commits, st.Tombstones(), st.Archives, st.Payloads)
	return (&Checker{Runs: runs, State: st, Ledger: l}).Check()
}

func invariants(vs []Violation) []Invariant {
	var out []Invariant
	for _, v := range vs {
		if !slices.Contains(out, v.Invariant) {
			out = append(out, v.Invariant)
		}
	}
	return out
}

func TestCheckConcurrency(t *testing.T) {
	a := hist("a").add(0, started("d", keyed1)).add(10, &event.RunAdmitted{Group: "g", Key: "k"}).add(50, &event.RunCompleted{Output: json.RawMessage(`1`)})
	b := hist("b").add(5, started("d", keyed1)).add(50, &event.RunAdmitted{Group: "g", Key: "k"}).add(90, &event.RunCompleted{Output: json.RawMessage(`1`)})
	require.Empty(t, check(t, nil, nil, a, b), "b admitted as a ended: within the limit")

	c := hist("c").add(5, started("d", keyed1)).add(40, &event.RunAdmitted{Group: "g", Key: "k"}).add(90, &event.RunCompleted{Output: json.RawMessage(`1`)})
	vs := check(t, nil, nil, a, c)
	require.Equal(t, []Invariant{InvConcurrency}, invariants(vs), "%v", vs)
	require.ElementsMatch(t, []string{"a", "c"}, vs[0].Runs)
}

// A reset run that copied its old run's run.admitted holds no slot of its own: once the old
// run's slot is released, another run is admitted while the reset run is live (known bug 1).
func TestCheckResetEscapesFlowControl(t *testing.T) {
	x := hist("x").add(0, started("d", keyed1)).add(10, &event.RunAdmitted{Group: "g", Key: "k"}).
		add(20, &event.SignalAwaited{WaitID: "go", Name: "go"}).
		add(100, &event.RunReset{NewRunID: "x=_reset-1", Seq: 2, Mode: event.ResetToSeq, Terminated: true}).
		add(100, &event.RunFailed{Error: event.ErrorInfo{Kind: "terminated", Message: "reset"}, Cause: event.CauseOperator})
	rs := started("d", keyed1)
	rs.ResetFrom = &event.ResetFrom{RunID: "x", Seq: 2, Mode: event.ResetToSeq, CopiedTo: 3, SeedRunID: "x"}
	y := &synth{run: "x=_reset-1"}
	y.commits = append(y.commits, Commit{At: at(95), RunID: y.run, First: 1, Last: 2, Events: []event.Envelope{
		{RunID: y.run, Seq: 1, Time: at(0), Payload: rs},
		{RunID: y.run, Seq: 2, Time: at(10), Payload: &event.RunAdmitted{Group: "g", Key: "k"}}}})
	y.add(120, &event.SignalAwaited{WaitID: "go", Name: "go"})
	z := hist("z").add(50, started("d", keyed1)).add(110, &event.RunAdmitted{Group: "g", Key: "k"})
	vs := check(t, nil, nil, x, y, z)
	require.Equal(t, []Invariant{InvConcurrency}, invariants(vs), "%v", vs)
	require.ElementsMatch(t, []string{"x=_reset-1", "z"}, vs[0].Runs)
	require.Contains(t, vs[0].Detail, "copied its run.admitted")
}

func TestCheckRate(t *testing.T) {
	ctl := &event.FlowControl{Group: "g", Key: "k", Rate: 2, RatePeriod: event.Duration(time.Second)}
	var hs []*synth
	for i, ms := range []int{0, 600, 1001} {
		hs = append(hs, hist(string(rune('a'+i))).add(0, started("d", ctl)).add(ms, &event.RunAdmitted{Group: "g"}))
	}
	require.Empty(t, check(t, nil, nil, hs...), "at most 2 in any closed 1s window")
	hs = append(hs, hist("d").add(0, started("d", ctl)).add(1000, &event.RunAdmitted{Group: "g"}))
	require.Equal(t, []Invariant{InvRate}, invariants(check(t, nil, nil, hs...)))
}

func TestCheckArchive(t *testing.T) {
	h := hist("a").add(0, started("d", nil)).add(10, &event.RunCompleted{Output: json.RawMessage(`1`)}).
		add(30, &event.RunReset{NewRunID: "a=_reset-1", Seq: 1, Mode: event.ResetToSeq})
	archive := []event.Envelope{h.commits[0].Events[0], h.commits[1].Events[0]}
	st := &State{Index: map[string]IndexEntry{"a": {RunID: "a", Status: "completed", Deleted: &Tombstone{At: at(20), Archive: "objectstore:FLOW_ARCHIVE/a", Purged: true}}},
		Archives: map[string][]event.Envelope{"a": archive}}
	vs := check(t, nil, st, h)
	require.Equal(t, []Invariant{InvArchive}, invariants(vs), "%v", vs)
	require.Contains(t, vs[0].Detail, "seq 3 run.reset")

	st.Archives["a"] = append(archive, h.commits[2].Events[0])
	require.Empty(t, check(t, nil, st, h))
}

func TestCheckUpdateAbortedButApplied(t *testing.T) {
	x := hist("x").add(0, started("d", nil)).add(10, &event.UpdateReceived{UpdateID: "u1", Name: "slow", Payload: json.RawMessage(`1`)}).
		add(20, &event.UpdateAccepted{UpdateID: "u1"}).
		add(30, &event.RunReset{NewRunID: "x=_reset-1", Seq: 1, Mode: event.ResetToSeq, Terminated: true}).
		add(30, &event.RunFailed{Error: event.ErrorInfo{Kind: "terminated", Message: "reset"}, Cause: event.CauseOperator})
	rs := started("d", nil)
	rs.ResetFrom = &event.ResetFrom{RunID: "x", Seq: 1, Mode: event.ResetToSeq, CopiedTo: 3, Reapplied: 1, SeedRunID: "x"}
	y := hist("x=_reset-1").add(25, rs).add(25, &event.UpdateReceived{UpdateID: "u1", Name: "slow", Payload: json.RawMessage(`1`)}).
		add(40, &event.UpdateAccepted{UpdateID: "u1"}).add(50, &event.UpdateCompleted{UpdateID: "u1", Result: json.RawMessage(`"r"`)})
	l := &Ledger{defPaused: map[string]bool{}}
	l.add(Ack{Op: 1, Kind: KindUpdate, Asked: "x", Run: "x", ID: "u1", Acked: true, At: at(10), Update: &UpdateAnswer{Status: "aborted"}})
	vs := check(t, l, nil, x, y)
	require.Equal(t, []Invariant{InvUpdateAnswer}, invariants(vs), "%v", vs)
	require.Contains(t, vs[0].Detail, "yet run x=_reset-1 completed it")
}

func TestCheckSignalExactlyOnce(t *testing.T) {
	h := hist("a").add(0, started("d", nil)).add(10, &event.SignalReceived{Name: "go", Payload: json.RawMessage(`1`), DeliveryID: "d1"})
	l := &Ledger{defPaused: map[string]bool{}}
	l.add(Ack{Op: 1, Kind: KindSignal, Asked: "a", Run: "a", ID: "d1", Acked: true, At: at(10)})
	l.add(Ack{Op: 2, Kind: KindSignal, Asked: "a", Run: "a", ID: "d2", Acked: true, At: at(12)})
	vs := check(t, l, nil, h)
	require.Equal(t, []Invariant{InvExactlyOnce}, invariants(vs), "%v", vs)
	require.Contains(t, vs[0].Detail, `"d2"`)

	h.add(20, &event.SignalReceived{Name: "go", Payload: json.RawMessage(`1`), DeliveryID: "d2"}).
		add(30, &event.SignalReceived{Name: "go", Payload: json.RawMessage(`1`), DeliveryID: "d2"})
	require.Equal(t, []Invariant{InvExactlyOnce, InvHistory}, invariants(check(t, l, nil, h)))
}

func TestCheckLeaks(t *testing.T) {
	h := hist("a").add(0, started("d", keyed1)).add(10, &event.RunAdmitted{Group: "g", Key: "k"}).add(20, &event.RunCompleted{Output: json.RawMessage(`1`)})
	st := &State{Holders: map[string]map[string]string{"g.g": {"a": "k"}}, Queue: map[string]bool{"a": true},
		Damaged: map[string]string{"b": "gap"}}
	vs := check(t, nil, st, h)
	require.Equal(t, []Invariant{InvQuarantine, InvSlotLeak}, invariants(vs), "%v", vs)
}

func TestCheckOneLiveRun(t *testing.T) {
	x := hist("x").add(0, started("d", nil)).add(10, &event.RunCompleted{Output: json.RawMessage(`1`)}).
		add(20, &event.RunReset{NewRunID: "x=_reset-1", Seq: 1, Mode: event.ResetToSeq}).
		add(40, &event.RunReset{NewRunID: "x=_reset-2", Seq: 1, Mode: event.ResetToSeq})
	reset := func(id string, ms int) *synth {
		rs := started("d", nil)
		rs.ResetFrom = &event.ResetFrom{RunID: "x", Seq: 1, Mode: event.ResetToSeq, CopiedTo: 2, SeedRunID: "x"}
		h := &synth{run: id}
		h.commits = []Commit{{At: at(ms), RunID: id, First: 1, Last: 1, Events: []event.Envelope{{RunID: id, Seq: 1, Time: at(0), Payload: rs}}}}
		return h.add(ms+1, &event.SignalAwaited{WaitID: "go", Name: "go"})
	}
	require.Empty(t, check(t, nil, nil, x, reset("x=_reset-1", 19)))
	vs := check(t, nil, nil, x, reset("x=_reset-1", 19), reset("x=_reset-2", 39))
	require.Equal(t, []Invariant{InvOneLive}, invariants(vs), "%v", vs)
}

func TestCheckScheduleOverlap(t *testing.T) {
	ref := func(slot int) *event.RunStarted {
		s := started("d", nil)
		s.Schedule = &event.ScheduleRef{Name: "s", Slot: at(slot), Action: event.ScheduleScheduled}
		return s
	}
	a := hist("s-1").add(1000, ref(1000)).add(1001, &event.RunContinuedAsNew{SuccessorRunID: "s-1=1", Input: json.RawMessage(`{}`)})
	a2 := hist("s-1=1").add(1002, ref(1000)).add(2500, &event.RunCompleted{Output: json.RawMessage(`1`)})
	a2.commits[0].Events[0].Payload.(*event.RunStarted).ContinuedFrom = "s-1"
	b := hist("s-2").add(2000, ref(2000)).add(2100, &event.RunCompleted{Output: json.RawMessage(`1`)})
	l := &Ledger{defPaused: map[string]bool{}, schedules: []ScheduleEpoch{{Name: "s", Def: "d", Overlap: "skip", Created: at(0)}}}
	vs := check(t, l, nil, a, a2, b)
	require.Equal(t, []Invariant{InvOverlap}, invariants(vs), "%v", vs)
	require.ElementsMatch(t, []string{"s-1", "s-2"}, vs[0].Runs, "the chain's first run counts until its continuation ends")

	l.schedules[0].Overlap = "allow_all"
	require.Empty(t, check(t, l, nil, a, a2, b))
}

// A reset that ends a scheduled run goes on with its chain; a rerun of a run that had ended
// (the schedule saw its chain end) starts a run the schedule does not count.
func TestCheckScheduleOverlapThroughResets(t *testing.T) {
	ref := func(slot int) *event.RunStarted {
		s := started("d", nil)
		s.Schedule = &event.ScheduleRef{Name: "s", Slot: at(slot), Action: event.ScheduleScheduled}
		return s
	}
	resetRun := func(id string, ms int) *synth {
		rs := ref(1000)
		rs.ResetFrom = &event.ResetFrom{RunID: "s-1", Seq: 1, Mode: event.ResetToSeq, CopiedTo: 2, SeedRunID: "s-1"}
		h := &synth{run: id}
		h.commits = []Commit{{At: at(ms), RunID: id, First: 1, Last: 1, Events: []event.Envelope{{RunID: id, Seq: 1, Time: at(ms), Payload: rs}}}}
		return h.add(ms+1, &event.SignalAwaited{WaitID: "go", Name: "go"})
	}
	l := &Ledger{defPaused: map[string]bool{}, schedules: []ScheduleEpoch{{Name: "s", Def: "d", Overlap: "cancel_other", Created: at(0)}}}
	b := hist("s-2").add(2000, ref(2000)).add(2100, &event.RunCompleted{Output: json.RawMessage(`1`)})

	rerun := hist("s-1").add(1000, ref(1000)).add(1500, &event.RunCancelled{Reason: "r"}).
		add(1900, &event.RunReset{NewRunID: "s-1=_reset-1", Seq: 1, Mode: event.ResetToSeq})
	require.Empty(t, check(t, l, nil, rerun, resetRun("s-1=_reset-1", 1900), b), "a rerun of an ended run is not the schedule's")

	ended := hist("s-1").add(1000, ref(1000)).
		add(1900, &event.RunReset{NewRunID: "s-1=_reset-1", Seq: 1, Mode: event.ResetToSeq, Terminated: true}).
		add(1900, &event.RunFailed{Error: event.ErrorInfo{Message: "reset"}, Cause: event.CauseOperator})
	vs := check(t, l, nil, ended, resetRun("s-1=_reset-1", 1900), b)
	require.Equal(t, []Invariant{InvOverlap}, invariants(vs), "%v", vs)
	require.ElementsMatch(t, []string{"s-1", "s-2"}, vs[0].Runs, "the chain goes on in the reset's new run")
}

func TestCheckStartDuplicateAndGap(t *testing.T) {
	h := hist("a").add(0, started("d", nil)).add(10, &event.RunCompleted{Output: json.RawMessage(`1`)}).add(20, &event.RunCompleted{Output: json.RawMessage(`2`)})
	require.Equal(t, []Invariant{InvHistory}, invariants(check(t, nil, nil, h)))
}

func TestFamily(t *testing.T) {
	for id, fam := range map[string]string{
		"r1": "r1", "r1=_2": "r1", "r1=_reset-0a1b": "r1", "r1=_reset-0a1b=3": "r1", "r1=_1=_reset-ff=2": "r1",
		"r1=kid": "r1=kid", "r1=_reset-0a1b=kid": "r1=_reset-0a1b=kid", "r1=kid=1": "r1=kid",
	} {
		require.Equal(t, fam, Family(id), id)
	}
}

func TestShrink(t *testing.T) {
	all := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	calls := 0
	got := Shrink(all, func(c []int) bool {
		calls++
		return slices.Contains(c, 3) && slices.Contains(c, 7)
	}, time.Now().Add(time.Minute))
	require.Equal(t, []int{3, 7}, got)
	require.Less(t, calls, 60)

	require.Equal(t, all, Shrink(all, func([]int) bool { return false }, time.Now().Add(time.Minute)), "nothing smaller fails")
}

func TestGenerate(t *testing.T) {
	a, b := Generate(7, 3, GenConfig{}), Generate(7, 3, GenConfig{})
	require.Equal(t, Format(a), Format(b), "the same seed and sequence give the same operations")
	require.NotEqual(t, Format(a), Format(Generate(7, 4, GenConfig{})))

	seen := map[Kind]bool{}
	for n := range 200 {
		for _, op := range Generate(1, n, GenConfig{}) {
			seen[op.Kind()] = true
		}
	}
	for _, k := range Kinds {
		require.True(t, seen[k], "kind %s is generated", k)
	}
	for _, op := range Generate(1, 0, GenConfig{Ops: 200, Exclude: map[Kind]bool{KindReset: true}}) {
		require.NotEqual(t, KindReset, op.Kind())
	}
}

// A run whose input was offloaded is judged by the input the reference stands for: a plain run
// that waits for signal go owes nothing until it arrives, and then its completion.
func TestObligationsOfAnOffloadedInput(t *testing.T) {
	in := json.RawMessage(`{"key":"k1","flaky":true,"nap_ms":1441,"go":true}`)
	ref := payload.RefOf(in)
	h := hist("r").
		add(0, &event.RunStarted{Spec: event.Spec{Definition: DefPlain}, Input: ref.JSON(), Seed: "s"}).
		add(10, &event.WaitScheduled{WaitID: "nap", Deadline: at(1451)}).
		add(1451, &event.WaitFired{WaitID: "nap"}).
		add(1460, &event.SignalAwaited{WaitID: SignalGo, Name: SignalGo})
	h.commits[0].Payloads = map[string]json.RawMessage{ref.SHA256: in}
	l := &Ledger{defPaused: map[string]bool{}}
	runs := BuildRuns(h.commits, nil, nil, nil)
	require.True(t, runs["r"].In.Go, "the input is read through its reference")
	require.Empty(t, obligations(runs, l, at(5000)), "it waits for signal go, which the sequence never sends")

	h.add(6000, &event.SignalReceived{Name: SignalGo, DeliveryID: "d"})
	runs = BuildRuns(h.commits, nil, nil, nil)
	require.Equal(t, map[string]string{"r": "owes the completion"}, obligations(runs, l, at(7000)))
}

// A terminate_existing start replaces the run it found live or, when that run continued as new
// meanwhile, the continuation: a continuation written after the new run and terminated for it
// never counts as a second live run; one that is not terminated does.
func TestCheckReplacedContinuation(t *testing.T) {
	x := hist("x").add(0, started("d", nil)).add(21, &event.RunContinuedAsNew{SuccessorRunID: "x=1", Input: json.RawMessage(`{}`)})
	succ := func(end event.Payload) *synth {
		h := hist("x=1").add(22, started("d", nil))
		h.commits[0].Events[0].Payload.(*event.RunStarted).ContinuedFrom = "x"
		if end != nil {
			h.add(50, end)
		}
		return h
	}
	repl := started("d", nil)
	repl.StartPolicy = &event.StartPolicy{OnConflict: event.ConflictTerminateExisting, RunID: "x", Previous: "x", Replaces: true}
	next := hist("x=_1").add(20, repl).add(30, &event.SignalAwaited{WaitID: "go", Name: "go"})
	terminated := &event.RunFailed{Error: event.ErrorInfo{Kind: "terminated", Message: `replaced by run "x=_1"`}, Cause: event.CauseOperator}
	require.Empty(t, check(t, nil, nil, x, succ(terminated), next))
	vs := check(t, nil, nil, x, succ(nil), next)
	require.Equal(t, []Invariant{InvOneLive}, invariants(vs), "%v", vs)
}

// A queued run whose cancellation was requested while it or its definition is paused is
// cancelled once the pause ends: it owes nothing while paused.
func TestObligationsOfAPausedQueuedCancel(t *testing.T) {
	h := hist("q").add(0, started(DefQueue, keyed1)).add(10, &event.RunCancelRequested{Reason: "r"})
	runs := BuildRuns(h.commits, nil, nil, nil)
	l := &Ledger{defPaused: map[string]bool{}}
	require.Equal(t, map[string]string{"q": "was asked to cancel while queued and did not end"}, obligations(runs, l, at(5000)))
	l.defPaused[DefQueue] = true
	require.Empty(t, obligations(runs, l, at(5000)))
}

// An update a reset copied from an old run that ended with it unsettled stays aborted in the new
// run (reset_from.aborted_updates): the new run owes it no verdict.
func TestObligationsOfACopiedAbortedUpdate(t *testing.T) {
	for _, aborted := range []bool{true, false} {
		rs := started(DefPlain, nil)
		rs.Input = json.RawMessage(`{"key":"k","go":true}`)
		rs.ResetFrom = &event.ResetFrom{RunID: "x", Seq: 3, Mode: event.ResetToSeq, CopiedTo: 4, SeedRunID: "x"}
		if aborted {
			rs.ResetFrom.AbortedUpdates = []string{"u1"}
		}
		h := &synth{run: "x=_reset-1"}
		h.commits = []Commit{{At: at(100), RunID: h.run, First: 1, Last: 3, Events: []event.Envelope{
			{RunID: h.run, Seq: 1, Time: at(0), Payload: rs},
			{RunID: h.run, Seq: 2, Time: at(10), Payload: &event.SignalAwaited{WaitID: SignalGo, Name: SignalGo}},
			{RunID: h.run, Seq: 3, Time: at(20), Payload: &event.UpdateReceived{UpdateID: "u1", Name: UpdateSlow, Payload: json.RawMessage(`8`)}},
		}}}
		runs := BuildRuns(h.commits, nil, nil, nil)
		got := obligations(runs, &Ledger{defPaused: map[string]bool{}}, at(5000))
		if aborted {
			require.Empty(t, got)
		} else {
			require.Equal(t, map[string]string{h.run: `has update "u1" received and not judged`}, got)
		}
	}
}
