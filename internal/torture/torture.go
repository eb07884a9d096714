package torture

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Config configures the running of sequences.
type Config struct {
	// Replicas is 1 (one embedded server) or 3 (a three-node cluster, every stream at R3).
	Replicas int
	// Partitions is the number of history streams (streams.Config.Partitions); 0 means 1.
	Partitions int
	// Processes runs the services as processes of this test binary (see procstack.go), killed
	// with SIGKILL; otherwise they run in this process.
	Processes bool
	Gen       GenConfig
	// OpTimeout bounds each operation's request; SettleBound how long a sequence may take to
	// settle (the bound within which every run must progress); Quiet how long FLOW_HISTORY
	// must go unwritten before the check.
	OpTimeout, SettleBound, Quiet time.Duration
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
	// Debug logs every answer and every run's history after each sequence.
	Debug bool
}

func (c Config) withDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 20 * time.Second
	}
	if c.SettleBound == 0 {
		c.SettleBound = 90 * time.Second
	}
	if c.Quiet == 0 {
		c.Quiet = 1500 * time.Millisecond
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// Result is the outcome of one sequence.
type Result struct {
	Seed uint64
	N    int
	// Ops is the sequence that ran; Keep the indices of the generated sequence it kept (all
	// of them unless shrunk).
	Ops  []Op
	Keep []int
	// Faults counts the fault points armed, Died the processes that died at one, Kills the
	// services killed on purpose.
	Faults     int
	Died       int
	Kills      int
	Violations []Violation
	// Diagnosis describes the runs the violations name: their events and derived state.
	Diagnosis string
	// Err is set when the harness itself failed (a stack that would not start).
	Err      error
	Duration time.Duration
}

// Invariants returns the distinct invariants the result violates.
func (r Result) Invariants() []Invariant {
	var out []Invariant
	for _, v := range r.Violations {
		if !slices.Contains(out, v.Invariant) {
			out = append(out, v.Invariant)
		}
	}
	return out
}

// Summary is the result's summary line.
func (r Result) Summary() string {
	s := fmt.Sprintf("torture: seed %d sequence %d: %d operations, %d faults armed (%d processes died at one), %d kills, %d violations in %s",
		r.Seed, r.N, len(r.Ops), r.Faults, r.Died, r.Kills, len(r.Violations), r.Duration.Round(time.Second))
	if r.Err != nil {
		s += fmt.Sprintf(" (harness error: %v)", r.Err)
	}
	return s
}

// Report prints the result for a failure message: the sequence, how to run it again, and the
// violations with the runs involved.
func (r Result) Report(shrunkFrom int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", r.Summary())
	if shrunkFrom > len(r.Ops) {
		fmt.Fprintf(&b, "shrunk from %d to %d operations; ", shrunkFrom, len(r.Ops))
	}
	fmt.Fprintf(&b, "run it again with: go test -race -run 'TestTorture$' ./internal/torture -torture.seed %d -torture.seq %d", r.Seed, r.N)
	if len(r.Keep) > 0 && shrunkFrom > len(r.Ops) {
		keep := make([]string, len(r.Keep))
		for i, k := range r.Keep {
			keep[i] = fmt.Sprint(k)
		}
		fmt.Fprintf(&b, " -torture.keep %s", strings.Join(keep, ","))
	}
	fmt.Fprintf(&b, "\noperations:\n%s", Format(r.Ops))
	if len(r.Violations) > 0 {
		fmt.Fprintf(&b, "violations:\n")
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "  - %s\n", v)
		}
	}
	if r.Diagnosis != "" {
		fmt.Fprintf(&b, "diagnosis:\n%s", r.Diagnosis)
	}
	return b.String()
}

// RunSequence runs sequence n of seed: ops (with keep, the indices of the generated sequence they
// are) on a new stack, then settles and checks. t is the (sub)test that owns the stack, which
// stops when t ends.
func RunSequence(t testing.TB, cfg Config, seed uint64, n int, ops []Op, keep []int) (res Result) {
	cfg = cfg.withDefaults()
	start := time.Now()
	res = Result{Seed: seed, N: n, Ops: ops, Keep: keep}
	defer func() {
		res.Duration = time.Since(start)
		cfg.Logf("%s", res.Summary())
	}()
	ctx, cancel := context.WithTimeout(t.Context(), time.Duration(len(ops))*cfg.OpTimeout+2*cfg.SettleBound+time.Minute)
	defer cancel()

	var stack Stack
	if cfg.Processes {
		stack = NewProcesses(t, cfg.Replicas, cfg.Partitions)
	} else {
		stack = NewInProcess(t, cfg.Replicas, cfg.Partitions)
	}
	tap, err := StartTap(ctx, stack.JetStream())
	if err != nil {
		res.Err = err
		return res
	}
	defer tap.Stop()
	x := NewExecutor(ctx, stack, cfg.OpTimeout)
	defer x.StopWaiting()
	for i, op := range ops {
		if err := x.Apply(ctx, i, op); err != nil {
			res.Err = err
			break
		}
	}
	x.Finale(ctx)
	if res.Err == nil {
		res.Err = stack.Alive()
	}
	if res.Err != nil {
		return res
	}
	s, err := settle(ctx, stack.JetStream(), tap, x.Ledger(), cfg.Quiet, cfg.SettleBound)
	if err != nil {
		res.Err = err
		return res
	}
	// Once the stack is quiet, an update still waiting waits for something that will not
	// come (its run is paused, or waits for a signal): its caller gets no answer.
	x.StopWaiting()
	res.Faults = x.faults
	res.Died, res.Kills = stack.Counts()
	c := &Checker{Runs: s.Runs, State: s.State, Ledger: x.Ledger(), TapErrors: s.TapErrors, Stranded: s.Stranded, Now: s.At}
	res.Violations = c.Check()
	if len(s.Unsettled) > 0 {
		res.Violations = append(res.Violations, Violation{Invariant: InvStranded,
			Detail: fmt.Sprintf("the stack did not settle within %s: %s", cfg.SettleBound, strings.Join(s.Unsettled, "; "))})
	}
	if len(res.Violations) > 0 {
		res.Diagnosis = fmt.Sprintf("answers:\n%s%s", formatAcks(x.Ledger().Acks()), c.Describe(res.Violations))
	}
	if cfg.Debug {
		cfg.Logf("answers:\n%s\nruns:\n%s", formatAcks(x.Ledger().Acks()), formatRuns(s.Runs))
	}
	return res
}

// Select returns the operations of ops at indices keep (all of them when keep is empty).
func Select(ops []Op, keep []int) ([]Op, []int) {
	if len(keep) == 0 {
		keep = make([]int, len(ops))
		for i := range keep {
			keep[i] = i
		}
		return ops, keep
	}
	var out []Op
	for _, k := range keep {
		if k >= 0 && k < len(ops) {
			out = append(out, ops[k])
		}
	}
	return out, keep
}

func formatAcks(acks []Ack) string {
	var b strings.Builder
	for _, a := range acks {
		fmt.Fprintf(&b, "  op %2d %-17s %-8s -> run %s", a.Op, a.Kind, a.Asked, a.Run)
		if a.NewRun != "" {
			fmt.Fprintf(&b, " new %s", a.NewRun)
		}
		if a.Update != nil {
			fmt.Fprintf(&b, " update %s %s", a.Update.Status, a.Update.Result)
		}
		if a.Err != "" {
			fmt.Fprintf(&b, " error: %s", a.Err)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func formatRuns(runs map[string]*Run) string {
	keys := make([]string, 0, len(runs))
	for k := range runs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		r := runs[k]
		fmt.Fprintf(&b, "  %s (%s, created %s", k, r.Def, r.Created.Format(timeFormat))
		if r.Ended() {
			fmt.Fprintf(&b, ", %s %s", r.EndType, r.End.Format(timeFormat))
		}
		if r.Tombstone != nil {
			fmt.Fprintf(&b, ", deleted")
		}
		b.WriteString("):")
		for _, e := range r.Events {
			fmt.Fprintf(&b, " %d:%s", e.Seq, e.Type())
		}
		b.WriteString("\n")
	}
	return b.String()
}
