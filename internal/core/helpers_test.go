package core_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

var epoch = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// history builds a valid-looking history event by event: sequences count from 1 and each event
// is recorded one second after the previous one.
type history struct {
	t    testing.TB
	run  string
	now  time.Time
	envs []event.Envelope
}

func newHistory(t testing.TB, run string, spec event.Spec) *history {
	t.Helper()
	h := &history{t: t, run: run, now: epoch}
	if spec.Definition == "" {
		spec.Definition = "test"
	}
	return h.add(&event.RunStarted{Spec: spec, Input: json.RawMessage(`{"order":"order-2026-0001"}`), Seed: "seed-for-tests"})
}

func (h *history) add(ps ...event.Payload) *history {
	for _, p := range ps {
		h.envs = append(h.envs, event.Envelope{RunID: h.run, Seq: uint64(len(h.envs) + 1), Time: h.now, Payload: p})
		h.now = h.now.Add(time.Second)
	}
	return h
}

func (h *history) snapshot() *core.Snapshot {
	h.t.Helper()
	s, err := core.Project(h.run, h.envs)
	require.NoError(h.t, err)
	return s
}

func stepSpec(id, name, input string) event.StepSpec {
	return event.StepSpec{ID: id, Name: name, Input: json.RawMessage(input), Retry: event.RetryPolicy{}.Normalize()}
}

func scheduled(steps ...event.StepSpec) *event.StepScheduled {
	return &event.StepScheduled{Steps: steps}
}

func call(id, name, input string) core.StepCall {
	return core.StepCall{ID: id, Name: name, Input: json.RawMessage(input)}
}

// script is a Decider whose workflow code is a function of the snapshot.
type script struct {
	id core.Identity
	fn func(s *core.Snapshot) core.Decision
}

func (d script) Identity(string) (core.Identity, error) { return d.id, nil }

func (d script) RunWorkflow(_ string, _ json.RawMessage, s *core.Snapshot) (core.Decision, error) {
	return d.fn(s), nil
}

func always(dec core.Decision) script {
	return script{fn: func(*core.Snapshot) core.Decision { return dec }}
}
