package core_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// longHistory returns a history of n events: run.started, then steps scheduled and completed in
// turn, as a long-running workflow writes them.
func longHistory(n int) []event.Envelope {
	run := "bench"
	t := epoch
	envs := make([]event.Envelope, 0, n)
	add := func(p event.Payload) {
		envs = append(envs, event.Envelope{RunID: run, Seq: uint64(len(envs) + 1), Time: t, Payload: p})
		t = t.Add(time.Millisecond)
	}
	add(&event.RunStarted{Spec: event.Spec{Definition: "bench"}, Input: json.RawMessage(`{}`), Seed: "s"})
	for i := 0; len(envs) < n; i++ {
		id := "step-" + strconv.Itoa(i)
		add(scheduled(stepSpec(id, "work", `{"i":`+strconv.Itoa(i)+`}`)))
		if len(envs) < n {
			add(&event.StepCompleted{StepID: id, Attempt: 1, Output: json.RawMessage(`"ok"`)})
		}
	}
	return envs
}

// BenchmarkDecision measures the per-decision cost on the incremental snapshot: apply the event
// that woke the run, then validate the workflow's one decision. It must not grow with history
// length. Run: go test -run - -bench BenchmarkDecision ./internal/core
func BenchmarkDecision(b *testing.B) {
	next := core.ScheduleSteps{Steps: []core.StepCall{call("next", "work", `{"i":-1}`)}}
	for _, n := range []int{10, 1_000, 100_000} {
		hist := longHistory(n)
		b.Run(fmt.Sprintf("history=%d/new-step", n), func(b *testing.B) {
			benchDecision(b, hist, next, false)
		})
		b.Run(fmt.Sprintf("history=%d/pending-step", n), func(b *testing.B) {
			pending := event.Envelope{RunID: "bench", Seq: uint64(n + 1), Time: epoch.Add(time.Hour), Payload: scheduled(stepSpec("next", "work", `{"i":-1}`))}
			benchDecision(b, append(hist[:n:n], pending), next, true)
		})
	}
}

// benchDecision projects hist, then measures: apply one new event, validate dec.
func benchDecision(b *testing.B, hist []event.Envelope, dec core.Decision, waiting bool) {
	s, err := core.Project("bench", hist)
	if err != nil {
		b.Fatal(err)
	}
	seq, t := s.Seq, s.UpdatedAt
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		seq++
		t = t.Add(time.Millisecond)
		wake := event.Envelope{RunID: "bench", Seq: seq, Time: t, Payload: &event.SignalReceived{
			Name: "poke", Payload: json.RawMessage(`1`), DeliveryID: "d" + strconv.Itoa(i)}}
		if err := s.Apply(wake); err != nil {
			b.Fatal(err)
		}
		v, err := core.Validate(s, dec)
		if err != nil || v.Waiting() != waiting {
			b.Fatalf("verdict %+v, error %v", v, err)
		}
	}
}

// BenchmarkProject measures projecting a whole history from scratch (a cold load), for
// comparison: it grows linearly with history length.
func BenchmarkProject(b *testing.B) {
	for _, n := range []int{10, 1_000, 100_000} {
		hist := longHistory(n)
		b.Run(fmt.Sprintf("history=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := core.Project("bench", hist); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// batchSizes are the batch sizes of BenchmarkBatch.
var batchSizes = []int{125, 250, 500, 1000, 2000}

// batchCalls returns the members of workload W4's batch of n: member i runs step "work" on
// input i.
func batchCalls(n int) []core.StepCall {
	calls := make([]core.StepCall, n)
	for i := range calls {
		calls[i] = core.StepCall{ID: "member-" + strconv.Itoa(i), Name: "work", Input: json.RawMessage(strconv.Itoa(i))}
	}
	return calls
}

// batchWorkflow is the workflow of workload W4: one ScheduleSteps batch of n members,
// re-issued on every decision until all members completed, then Complete. With rebuild, the
// batch is built afresh on every call, as workflow code builds it; otherwise one batch is
// returned every time, so that the loop measures the core alone.
func batchWorkflow(n int, rebuild bool) script {
	calls := batchCalls(n)
	return script{fn: func(s *core.Snapshot) core.Decision {
		if s.Progress.StepsCompleted == n {
			return core.Complete{Output: json.RawMessage(strconv.Itoa(n))}
		}
		if rebuild {
			return core.ScheduleSteps{Steps: batchCalls(n)}
		}
		return core.ScheduleSteps{Steps: calls}
	}}
}

// nextAttempt returns the first attempt in flight, as the engine lists them after each
// decision (launch); ok is false when there is none.
type nextAttempt func(s *core.Snapshot) (a core.Attempt, ok bool)

// allAttempts lists every attempt in flight with core.Attempts, as the engine's launch does.
func allAttempts(s *core.Snapshot) (core.Attempt, bool) {
	as := core.Attempts(s)
	if len(as) == 0 {
		return core.Attempt{}, false
	}
	return as[0], true
}

// firstAttempt takes the first attempt in flight from core.InFlightAttempts and stops, as an
// engine that starts attempts until its step slots are full would.
func firstAttempt(s *core.Snapshot) (core.Attempt, bool) {
	for a := range core.InFlightAttempts(s) {
		return a, true
	}
	return core.Attempt{}, false
}

// driveBatch replays the engine's decision loop for workflow wf from run.started to the run's
// end: decide and commit, list the attempts in flight with next (the engine's launch), complete
// the first (core.StepResult), decide again. It returns the history.
func driveBatch(tb testing.TB, wf core.Decider, next nextAttempt) []event.Envelope {
	br := &batchRun{s: core.New("batch"), t: epoch}
	s := br.s
	commit := func(ps []event.Payload) {
		br.commit(tb, ps)
		br.t = br.t.Add(time.Millisecond)
	}
	commit(br.started())
	for !s.Terminal() {
		v, err := core.Decide(s, wf, core.DecideOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		if !v.Waiting() {
			commit(v.Events)
		}
		a, ok := next(s)
		if !ok {
			continue
		}
		events, err := core.StepResult(s, a.StepID, a.Attempt, core.StepOutcome{Output: a.Input}, br.t)
		if err != nil {
			tb.Fatal(err)
		}
		commit(events)
	}
	return br.hist
}

// batchRun is the run a batch driver decides: its snapshot, the history committed so far and
// the time the next events are stamped with.
type batchRun struct {
	s    *core.Snapshot
	t    time.Time
	hist []event.Envelope
}

// started is the run.started event the drivers begin with.
func (br *batchRun) started() []event.Payload {
	return []event.Payload{&event.RunStarted{Spec: event.Spec{Definition: "batch"}, Input: json.RawMessage(`{}`), Seed: "s"}}
}

// commit applies ps to the snapshot in turn, stamped with br.t, and appends them to the
// history; an event the snapshot refuses fails tb.
func (br *batchRun) commit(tb testing.TB, ps []event.Payload) {
	for _, p := range ps {
		e := event.Envelope{RunID: br.s.RunID, Seq: br.s.Seq + 1, Time: br.t, Payload: p}
		if err := br.s.Apply(e); err != nil {
			tb.Fatal(err)
		}
		br.hist = append(br.hist, e)
	}
}

// driveBatchTogether is driveBatch for a driver that records the results of up to k attempts
// that finished together (one core.StepResult each, applied in turn) before it decides once,
// as the engine's record does.
func driveBatchTogether(tb testing.TB, wf core.Decider, k int) []event.Envelope {
	br := &batchRun{s: core.New("batch"), t: epoch}
	s := br.s
	commit := func(ps []event.Payload) { br.commit(tb, ps) }
	commit(br.started())
	done := make([]core.Attempt, 0, k)
	for !s.Terminal() {
		br.t = br.t.Add(time.Millisecond)
		v, err := core.Decide(s, wf, core.DecideOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		if !v.Waiting() {
			commit(v.Events)
		}
		done = done[:0]
		for a := range core.InFlightAttempts(s) {
			done = append(done, a)
			if len(done) == k {
				break
			}
		}
		for _, a := range done {
			events, err := core.StepResult(s, a.StepID, a.Attempt, core.StepOutcome{Output: a.Input}, br.t)
			if err != nil {
				tb.Fatal(err)
			}
			commit(events)
		}
	}
	return br.hist
}

// BenchmarkBatch measures workload W4 in the core, per batch size n: "loop" is the whole
// decision loop of driveBatch (n+2 decisions) as the engine runs it, with the workflow building
// its batch on every decision; "loop-core" returns one prebuilt batch instead, so that only the
// core's cost remains, and "loop-iter" lists the attempts with core.InFlightAttempts instead
// of core.Attempts, and "loop-together" records the results of 16 attempts (the engine's
// default step concurrency) before each decision, as the engine's record does when they
// finish together; "project" is a cold load of the finished history (core.Project),
// "replay" its verification (core.Replay). ns/member is the time per member: flat when the cost
// is linear in the batch size.
// Run: go test -run - -bench BenchmarkBatch ./internal/core
func BenchmarkBatch(b *testing.B) {
	for _, n := range batchSizes {
		hist := driveBatch(b, batchWorkflow(n, false), allAttempts)
		// run measures op as the sub-benchmark name, per batch member too.
		run := func(name string, op func(b *testing.B)) {
			b.Run(fmt.Sprintf("n=%d/%s", n, name), func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					op(b)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/member")
			})
		}
		run("loop", func(b *testing.B) { driveBatch(b, batchWorkflow(n, true), allAttempts) })
		run("loop-core", func(b *testing.B) { driveBatch(b, batchWorkflow(n, false), allAttempts) })
		run("loop-iter", func(b *testing.B) { driveBatch(b, batchWorkflow(n, false), firstAttempt) })
		run("loop-together", func(b *testing.B) { driveBatchTogether(b, batchWorkflow(n, true), 16) })
		run("project", func(b *testing.B) {
			if _, err := core.Project("batch", hist); err != nil {
				b.Fatal(err)
			}
		})
		wf := batchWorkflow(n, false)
		run("replay", func(b *testing.B) {
			if _, err := core.Replay("batch", hist, wf, core.DecideOptions{}); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkPendingBatch measures one decision on a pending batch of n members, half of them
// completed: Validate of the re-issued batch. ns/member is the cost per member compared.
func BenchmarkPendingBatch(b *testing.B) {
	for _, n := range batchSizes {
		hist := driveBatch(b, batchWorkflow(n, false), allAttempts)
		s, err := core.Project("batch", hist[:2+n/2+1])
		if err != nil {
			b.Fatal(err)
		}
		d := core.ScheduleSteps{Steps: batchCalls(n)}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if v, err := core.Validate(s, d); err != nil || !v.Waiting() {
					b.Fatal(v, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/member")
		})
	}
}
