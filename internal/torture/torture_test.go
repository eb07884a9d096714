package torture

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	flagDuration  = flag.Duration("torture.duration", 2*time.Minute, "run sequences until this much time has passed (at least one)")
	flagSeed      = flag.Uint64("torture.seed", 0, "the seed of the sequences; 0 picks one from the clock (printed)")
	flagSeq       = flag.Int("torture.seq", -1, "run only sequence N of the seed (with -torture.seed, to reproduce a failure)")
	flagKeep      = flag.String("torture.keep", "", "run only these operations of the sequence (comma-separated indices, as a shrunk failure prints them)")
	flagReplicas  = flag.Int("torture.replicas", 1, "1: one embedded server; 3: a three-node cluster at R3")
	flagParts     = flag.Int("torture.partitions", 1, "the number of history streams (FLOW_STREAMS_PARTITIONS)")
	flagProcesses = flag.Bool("torture.processes", false, "run the services as processes and kill them with SIGKILL")
	flagOps       = flag.Int("torture.ops", DefaultOps, "operations per sequence")
	flagExclude   = flag.String("torture.exclude", "", "leave out operations of these kinds (comma-separated, e.g. reset,kill): to explore past a known bug")
	flagShrink    = flag.Duration("torture.shrink", 2*time.Minute, "how long to spend shrinking each failure, after the run")
	flagShrinkN   = flag.Int("torture.shrinkn", 1, "how many failures (with distinct violated invariants) to shrink")
	flagDebug     = flag.Bool("torture.debug", false, "log every answer and every run's events after each sequence")
	flagScenarios = flag.Bool("torture.scenarios", true, "run the findings' scenarios (scenarios.go) before the random sequences, within the budget")
	flagSettle    = flag.Duration("torture.settle", 90*time.Second, "how long a sequence may take to settle: the bound within which every run must progress")
)

// envSeed is the seed TestTorture uses when -torture.seed is not given: `make test` pins one, so
// that CI replays the same sequences (a regression check of what they met) while `make torture`
// explores new seeds.
const envSeed = "FLOW_TORTURE_SEED"

// TestTorture runs random sequences of operations against a stack, with faults and kills,
// and checks the invariants after each (see doc.go). It fails with the shrunk sequence of
// each distinct violation it found.
func TestTorture(t *testing.T) {
	seed := *flagSeed
	if v := os.Getenv(envSeed); seed == 0 && v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: not a seed (an unsigned integer)", envSeed, v)
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	cfg := Config{Replicas: *flagReplicas, Partitions: *flagParts, Processes: *flagProcesses, SettleBound: *flagSettle, Logf: t.Logf, Debug: *flagDebug,
		Gen: GenConfig{Ops: *flagOps, Exclude: map[Kind]bool{}}}
	for _, k := range strings.Split(*flagExclude, ",") {
		if k = strings.TrimSpace(k); k != "" {
			if !slices.Contains(Kinds, Kind(k)) {
				t.Fatalf("-torture.exclude: %q is not a kind of operation; kinds: %v", k, Kinds)
			}
			cfg.Gen.Exclude[Kind(k)] = true
		}
	}
	var keep []int
	for _, s := range strings.Split(*flagKeep, ",") {
		if s = strings.TrimSpace(s); s != "" {
			i, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("-torture.keep: %q is not an operation index", s)
			}
			keep = append(keep, i)
		}
	}
	t.Logf("torture: seed %d, replicas %d, partitions %d, processes %v, %d operations per sequence, excluded %v", seed, cfg.Replicas, cfg.Partitions, cfg.Processes, *flagOps, *flagExclude)

	start := time.Now()
	// Stop exploring, and shrinking, well before the test binary's deadline (-timeout): a
	// timeout would lose every report.
	end := start.Add(*flagDuration)
	deadline, hasDeadline := t.Deadline()
	if hasDeadline {
		deadline = deadline.Add(-2**flagSettle - time.Minute)
		if end.After(deadline) {
			end = deadline
		}
	}
	var (
		sequences, ops, faults, kills, violations int
		failures                                  []Result
		reports                                   []string
	)
	tally := func(res Result) {
		sequences++
		ops += len(res.Ops)
		faults += res.Faults
		kills += res.Kills + res.Died
		violations += len(res.Violations)
	}
	// The findings' scenarios first (scenarios.go): each fixed finding is checked in every
	// budget, however short, whatever the random sequences meet.
	if *flagSeq < 0 && *flagScenarios {
		for _, sc := range Scenarios {
			if sc.Processes && !cfg.Processes {
				continue // it needs a process to kill between two writes
			}
			scfg := cfg
			scfg.SettleBound = scenarioWait
			var res Result
			t.Run("scenario-"+sc.Name, func(t *testing.T) { res = RunSequence(t, scfg, 0, 0, sc.Ops, nil) })
			tally(res)
			switch {
			case res.Err != nil:
				reports = append(reports, fmt.Sprintf("scenario %s: harness error: %s\n%s", sc.Name, res.Err, res.Report(len(res.Ops))))
			case len(res.Violations) > 0:
				reports = append(reports, fmt.Sprintf("scenario %s (%s) violates %v\n%s", sc.Name, sc.Finding, res.Invariants(), res.Report(len(res.Ops))))
			}
		}
	}
	first := max(*flagSeq, 0)
	for n := first; ; n++ {
		if n > first && (*flagSeq >= 0 || time.Now().After(end)) {
			break
		}
		seqOps, seqKeep := Select(Generate(seed, n, cfg.Gen), keep)
		var res Result
		t.Run(fmt.Sprintf("seq-%d", n), func(t *testing.T) { res = RunSequence(t, cfg, seed, n, seqOps, seqKeep) })
		tally(res)
		switch {
		case res.Err != nil:
			reports = append(reports, fmt.Sprintf("harness error: %s\n%s", res.Err, res.Report(len(res.Ops))))
		case len(res.Violations) > 0:
			failures = append(failures, res)
			t.Logf("torture: sequence %d failed (reported again, shrunk, at the end):\n%s", n, res.Report(len(res.Ops)))
		}
	}
	t.Logf("torture: %d sequences, %d operations, %d faults armed, %d kills, %d violations in %s (seed %d)",
		sequences, ops, faults, kills, violations, time.Since(start).Round(time.Second), seed)

	// Shrink the first failure of each distinct set of violated invariants, up to
	// -torture.shrinkn of them; report the others as they are.
	var shrunk [][]Invariant
	for _, res := range failures {
		invs := res.Invariants()
		switch {
		case slices.ContainsFunc(shrunk, func(s []Invariant) bool { return slices.Equal(s, invs) }):
			reports = append(reports, fmt.Sprintf("(violates the invariants of a failure above)\n%s", res.Report(len(res.Ops))))
		case len(shrunk) < *flagShrinkN && *flagShrink > 0 && (!hasDeadline || time.Now().Add(*flagShrink).Before(deadline)):
			shrunk = append(shrunk, invs)
			reports = append(reports, shrinkFailure(t, cfg, res, Generate(seed, res.N, cfg.Gen), time.Now().Add(*flagShrink)))
		default:
			reports = append(reports, fmt.Sprintf("(not shrunk)\n%s", res.Report(len(res.Ops))))
		}
	}
	for _, r := range reports {
		t.Error(r)
	}
}

// partitionedSequences is how many sequences TestTorturePartitioned runs.
const partitionedSequences = 3

// TestTorturePartitioned runs the first sequences of the seed (FLOW_TORTURE_SEED, or one from
// the clock) on a history spread over three streams: every feature and fault of the sequences,
// checked by every invariant, with runs on different partitions, each with its own history
// consumer. make torture explores more of it with PARTITIONS=3.
func TestTorturePartitioned(t *testing.T) {
	if testing.Short() {
		t.Skip("the torture test's partitioned sequences take about 30 seconds")
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: not a seed (an unsigned integer)", envSeed, v)
		}
	}
	cfg := Config{Partitions: 3, Logf: t.Logf, Gen: GenConfig{Ops: DefaultOps, Exclude: map[Kind]bool{}}}
	for n := range partitionedSequences {
		var res Result
		t.Run(fmt.Sprintf("seq-%d", n), func(t *testing.T) { res = RunSequence(t, cfg, seed, n, Generate(seed, n, cfg.Gen), nil) })
		switch {
		case res.Err != nil:
			t.Errorf("seed %d sequence %d: harness error: %s\n%s", seed, n, res.Err, res.Report(len(res.Ops)))
		case len(res.Violations) > 0:
			t.Errorf("seed %d sequence %d on 3 partitions (reproduce: make torture PARTITIONS=3 SEED=%d SEQ=%d):\n%s", seed, n, seed, n, res.Report(len(res.Ops)))
		}
	}
}

// shrinkFailure shrinks a failing result to the shortest sequence found that violates its
// first invariant, and returns the report of that sequence.
func shrinkFailure(t *testing.T, cfg Config, res Result, generated []Op, until time.Time) string {
	target := res.Violations[0].Invariant
	best := res
	tries := 0
	keep := Shrink(res.Keep, func(cand []int) bool {
		tries++
		ops, _ := Select(generated, cand)
		var r Result
		t.Run(fmt.Sprintf("shrink-%d-%d", res.N, tries), func(t *testing.T) { r = RunSequence(t, cfg, res.Seed, res.N, ops, cand) })
		if r.Err == nil && slices.Contains(r.Invariants(), target) {
			best = r
			return true
		}
		return false
	}, until)
	best.Keep = keep
	t.Logf("torture: shrinking sequence %d for %s took %d runs: %d -> %d operations", res.N, target, tries, len(res.Ops), len(best.Ops))
	if len(best.Ops) == len(res.Ops) {
		return fmt.Sprintf("violated %s (not shrunk)\n%s", target, res.Report(len(res.Ops)))
	}
	res.Diagnosis = ""
	return fmt.Sprintf("violated %s\n%s\nthe sequence as generated:\n%s", target, best.Report(len(res.Ops)), res.Report(len(res.Ops)))
}

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		runChild(role)
		return
	}
	os.Exit(m.Run())
}

var flagScenario = flag.String("torture.scenario", "", "run the scenario of this name (scenarios.go), or all of them with \"all\"; TestScenario is skipped without it")

// TestScenario runs the hand-written reproductions of the torture's findings, and reports the
// invariants each violates. It fails while a finding stands.
func TestScenario(t *testing.T) {
	if *flagScenario == "" {
		t.Skip("no -torture.scenario: the findings' reproductions run on request")
	}
	ran := 0
	for _, sc := range Scenarios {
		if *flagScenario != "all" && *flagScenario != sc.Name {
			continue
		}
		ran++
		t.Run(sc.Name, func(t *testing.T) {
			cfg := Config{Processes: sc.Processes || *flagProcesses, Replicas: *flagReplicas, SettleBound: scenarioWait, Logf: t.Logf, Debug: *flagDebug}
			res := RunSequence(t, cfg, 0, 0, sc.Ops, nil)
			require.NoError(t, res.Err)
			if len(res.Violations) > 0 {
				t.Errorf("%s (%s): violates %v (expected while it stands: %s)\n%s", sc.Name, sc.Finding, res.Invariants(), sc.Want, res.Report(len(sc.Ops)))
			}
		})
	}
	if ran == 0 {
		t.Fatalf("-torture.scenario: no scenario %q", *flagScenario)
	}
}
