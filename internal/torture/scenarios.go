package torture

import (
	"time"

	"github.com/flowrun/flow/internal/fault"
)

// Scenario is a short, hand-written sequence that reproduces one finding of the torture (see
// TORTURE_FINDINGS.md), for whoever fixes it: `go test -race -run TestScenario ./internal/torture
// -torture.scenario NAME` runs it and reports the violations. TestTorture runs them all first,
// as regression tests of the fixed findings.
type Scenario struct {
	Name string
	// Finding names the finding (a known bug's number, or "new").
	Finding string
	// Want is the invariant the scenario violates while the finding stands.
	Want Invariant
	// Processes says the scenario needs services as processes (a kill between two writes).
	Processes bool
	Ops       []Op
}

// Scenarios lists the reproductions of the findings.
var Scenarios = []Scenario{
	{Name: "reset-escapes-flow-control", Finding: "known bug 1", Want: InvConcurrency, Ops: []Op{
		Start{Run: "a", Def: DefQueue, In: In{Key: "k0", Go: true}},
		Start{Run: "b", Def: DefQueue, In: In{Key: "k0", Go: true}},
		Wait{Ms: 500},
		Reset{Run: "a", Mode: ResetLastDecision},
		Wait{Ms: 500},
	}},
	{Name: "redelivered-first-commit", Finding: "known bug 2", Want: InvSlotLeak, Ops: []Op{
		// The history service applies the run's first commit and fails to acknowledge it: it
		// comes back after the ack wait (2s), once the run has ended.
		Fault{Point: fault.HistoryBeforeAck, Every: 1, Times: 1},
		Start{Run: "r0", Def: DefRated, In: In{Key: "k1", Steps: 1}},
		Wait{Ms: 3000},
	}},
	{Name: "reset-races-deletion", Finding: "known bug 4", Want: InvArchive, Ops: []Op{
		Start{Run: "r0", Def: DefBrief, In: In{Key: "k1"}},
		// The sweeper stops after each tombstone, so the purge waits for the next sweep.
		Fault{Point: fault.RetentionAfterTombstone, Every: 1, Times: 4},
		Wait{Ms: 1300},
		Reset{Run: "r0", Mode: ResetFirst},
		Wait{Ms: 500},
	}},
	{Name: "update-aborted-applied", Finding: "known bug 5", Want: InvUpdateAnswer, Ops: []Op{
		Start{Run: "r5", Def: DefPlain, In: In{Key: "k1", Go: true}},
		Update{Run: "r5", Name: UpdateSlow, Amount: 2, ID: "u1"},
		Reset{Run: "r5", Mode: ResetLastDecision},
		Wait{Ms: 1000},
	}},
	{Name: "schedule-chain-deleted", Finding: "known bug 6", Want: InvOverlap, Ops: []Op{
		// Each run naps 2s, then continues as new and naps 2s again; its first run is deleted
		// 1s after it continued, while its continuation naps.
		Schedule{Name: "sa", Def: DefBrief, In: In{Key: "k0", NapMs: 2000, CAN: 1}, EveryMs: 1000, Overlap: "buffer_one"},
		Wait{Ms: 5000},
	}},
	{Name: "double-trigger", Finding: "known bug 7", Want: InvExactlyOnce, Ops: []Op{
		Schedule{Name: "sa", Def: DefPlain, In: In{Key: "k1", NapMs: 500}, EveryMs: 60000, Overlap: "allow_all"},
		Trigger{Name: "sa", Overlap: "allow_all", Request: "t1", Twice: true},
		Trigger{Name: "sa", Overlap: "allow_all", Request: "t2", Twice: true},
		Trigger{Name: "sa", Overlap: "allow_all", Request: "t3", Twice: true},
	}},
	{Name: "reset-twice", Finding: "known bug 13", Want: InvOneLive, Ops: []Op{
		Start{Run: "r2", Def: DefPlain, In: In{Key: "k0", Go: true}},
		Wait{Ms: 300},
		Reset{Run: "r2", Mode: ResetFirst},
		Reset{Run: "r2", Mode: ResetFirst, Drop: true},
	}},
	{Name: "queued-run-lost-at-history-kill", Finding: "new (N2)", Want: InvStranded, Processes: true, Ops: []Op{
		// Every service restarts; the history service dies again at its second commit, after
		// reading it and before applying its consequences.
		Fault{Point: fault.HistoryBeforeEffects, Every: 2, Times: 2},
		Start{Run: "r2", Def: DefOldest, In: In{Key: "k1", Steps: 2, Go: true}},
		Start{Run: "r1", Def: DefQueue, In: In{Key: "k0", Steps: 2, NapMs: 371, Child: true}},
		Signal{Run: "r1", Name: "go", Delivery: "d9"},
		Signal{Run: "r2", Name: "go", Delivery: "d10"},
		Wait{Ms: 1000},
	}},
	{Name: "reuse-after-reset", Finding: "new", Want: InvOneLive, Ops: []Op{
		Start{Run: "r4", Def: DefPlain, In: In{Key: "k0", Go: true}},
		Wait{Ms: 300},
		Reset{Run: "r4", Mode: ResetFirst},
		Start{Run: "r4", Def: DefPlain, In: In{Key: "k0", Go: true}, Reuse: "allow"},
	}},
	// O11: a reset of an ID's first run after a later run reused the ID made a live run that a
	// start under the ID did not see (it follows the latest reuse); such a reset is refused now.
	{Name: "reset-of-superseded-run", Finding: "new", Want: InvOneLive, Ops: []Op{
		Start{Run: "r6", Def: DefPlain, In: In{Key: "k0", Go: true}},
		Terminate{Run: "r6"},
		Start{Run: "r6", Def: DefPlain, In: In{Key: "k0"}, Reuse: "allow"},
		Wait{Ms: 300},
		Reset{Run: "r6", Mode: ResetFirst},
		Start{Run: "r6", Def: DefPlain, In: In{Key: "k0", Go: true}, Reuse: "allow"},
	}},
}

// scenarioWait bounds how long a scenario may take to settle.
const scenarioWait = 30 * time.Second
