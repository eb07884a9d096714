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
