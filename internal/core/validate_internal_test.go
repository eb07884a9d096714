package core

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// batchRun builds the snapshot of a run that recorded one batch of steps or children, and
// gives the decision that re-issues it as recorded.
type batchRun struct {
	rng *rand.Rand
	// handWritten makes a few members what Validate would not record: a hand-written history.
	handWritten bool
	envs        []event.Envelope
}

// odd reports, for a hand-written history, whether a member gets one of its oddities.
func (b *batchRun) odd() bool { return b.handWritten && b.rng.IntN(8) == 0 }

func (b *batchRun) add(p event.Payload) {
	b.envs = append(b.envs, event.Envelope{RunID: "r", Seq: uint64(len(b.envs) + 1),
		Time: time.Date(2026, 11, 30, 9, 0, len(b.envs), 0, time.UTC), Payload: p})
}

// recordedPolicy returns a retry policy as recorded: normalized, as Validate records it, or
// valid but not normalized, as a hand-written history may hold it.
func (b *batchRun) recordedPolicy() event.RetryPolicy {
	switch {
	case b.odd():
		return event.RetryPolicy{MaxAttempts: 2, BackoffCoefficient: 1, OnExhaustion: event.ExhaustionFailRun, NonRetryable: []string{"x", "b"}}
	case b.rng.IntN(4) == 0:
		return event.RetryPolicy{MaxAttempts: 5, NonRetryable: []string{"fatal", "bad"}}.Normalize()
	}
	return event.RetryPolicy{}.Normalize()
}

// steps records a batch of n steps; some recorded with IDs or names that Validate would refuse
// (a hand-written history), and some settled. It returns the calls that re-issue it.
func (b *batchRun) steps(n int) []StepCall {
	specs := make([]event.StepSpec, n)
	calls := make([]StepCall, n)
	for i := range specs {
		id, name := fmt.Sprintf("m-%d", i), "work"
		if b.odd() {
			id = fmt.Sprintf("%d-m", i) // starts with a digit
		}
		if b.odd() {
			name = "a.b"
		}
		in := fmt.Sprintf(`{"i":%d}`, i)
		if b.odd() {
			in = fmt.Sprintf(`{ "i": %d }`, i) // not compacted
		}
		specs[i] = event.StepSpec{ID: id, Name: name, Input: json.RawMessage(in), Retry: b.recordedPolicy()}
		calls[i] = StepCall{ID: id, Name: name, Input: json.RawMessage(in), Retry: specs[i].Retry}
		if b.rng.IntN(2) == 0 && sameRetry(&specs[i].Retry, &defaultRetry) {
			calls[i].Retry = event.RetryPolicy{}
		}
	}
	b.add(&event.StepScheduled{Steps: specs})
	for _, sp := range specs {
		switch b.rng.IntN(6) {
		case 0:
			b.add(&event.StepCompleted{StepID: sp.ID, Attempt: 1, Output: json.RawMessage(`1`)})
		case 1:
			b.add(&event.StepFailed{StepID: sp.ID, Attempt: 1, Error: event.ErrorInfo{Message: "no"}, Final: true})
		}
	}
	return calls
}

// children records a batch of n children, some settled, and returns the calls that re-issue it.
func (b *batchRun) children(n int) []ChildCall {
	specs := make([]event.ChildSpec, n)
	calls := make([]ChildCall, n)
	for i := range specs {
		id := fmt.Sprintf("c-%d", i)
		if b.odd() {
			id = fmt.Sprintf("%d-c", i)
		}
		policy := []event.CancelPolicy{event.CancelPolicyRequest, event.CancelPolicyAbandon}[b.rng.IntN(2)]
		specs[i] = event.ChildSpec{ChildID: id, RunID: event.ChildRunID("r", id), Definition: "sub", Input: json.RawMessage(`{}`), CancelPolicy: policy}
		calls[i] = ChildCall{ID: id, Definition: "sub", Input: json.RawMessage(`{}`), CancelPolicy: policy}
		if policy == event.CancelPolicyRequest && b.rng.IntN(2) == 0 {
			calls[i].CancelPolicy = ""
		}
	}
	b.add(&event.ChildScheduled{Children: specs})
	for _, sp := range specs {
		if b.rng.IntN(3) == 0 {
			b.add(&event.ChildSettled{ChildID: sp.ChildID, RunID: sp.RunID, Outcome: event.OutcomeCompleted, Output: json.RawMessage(`1`)})
		}
	}
	return calls
}

// change makes one random change to a batch's members, or none; it never empties the batch.
func change[T any](rng *rand.Rand, calls []T, edit func(c *T)) []T {
	calls = slices.Clone(calls)
	n := len(calls)
	switch rng.IntN(8) {
	case 0, 1:
		// unchanged
	case 2:
		edit(&calls[rng.IntN(n)])
	case 3:
		if n > 1 {
			i, j := rng.IntN(n), rng.IntN(n)
			calls[i], calls[j] = calls[j], calls[i]
		}
	case 4:
		if n > 1 {
			i := rng.IntN(n)
			calls = slices.Delete(calls, i, i+1)
		}
	case 5:
		calls = append(calls, calls[rng.IntN(n)]) // a repeated ID
	case 6:
		var extra T
		edit(&extra)
		calls = slices.Insert(calls, rng.IntN(n+1), extra)
	default:
		edit(&calls[rng.IntN(n)])
		edit(&calls[rng.IntN(n)])
	}
	return calls
}

// TestPendingBatchAgreesWithFullValidation: whatever a re-issued batch looks like, recognising
// it as pending (pendingSteps, pendingChildren) gives exactly the verdict or error that
// validating it in full gives.
func TestPendingBatchAgreesWithFullValidation(t *testing.T) {
	t.Parallel()
	stepEdits := []func(c *StepCall){
		func(c *StepCall) { c.Input = json.RawMessage(`{"i":-1}`) },
		func(c *StepCall) { c.Input = json.RawMessage(` ` + string(c.Input)) },
		func(c *StepCall) { c.Input = json.RawMessage(`{"i":`) },
		func(c *StepCall) { c.Name = "other" },
		func(c *StepCall) { c.Name = "bad name" },
		func(c *StepCall) { c.ID = "fresh" },
		func(c *StepCall) { c.ID = "pause" },
		func(c *StepCall) { c.ID = "9" },
		func(c *StepCall) { c.Retry = event.RetryPolicy{} },
		func(c *StepCall) {
			c.Retry = event.RetryPolicy{MaxAttempts: 5, NonRetryable: []string{"bad", "fatal", "bad"}}
		},
		func(c *StepCall) { c.Retry = event.RetryPolicy{BackoffCoefficient: 0.5} },
		func(c *StepCall) { c.Retry = c.Retry.Normalize() },
	}
	childEdits := []func(c *ChildCall){
		func(c *ChildCall) { c.Input = json.RawMessage(`{"x":1}`) },
		func(c *ChildCall) { c.Input = json.RawMessage(` {} `) },
		func(c *ChildCall) { c.Definition = "subV2" },
		func(c *ChildCall) { c.CancelPolicy = event.CancelPolicyAbandon },
		func(c *ChildCall) { c.CancelPolicy = "kill" },
		func(c *ChildCall) { c.ID = "fresh" },
		func(c *ChildCall) { c.ID = "pause" },
	}
	rng := rand.New(rand.NewPCG(9, 9))
	recognised := map[string]int{}
	for round := range 3000 {
		b := &batchRun{rng: rng, handWritten: rng.IntN(4) == 0}
		b.add(&event.RunStarted{Spec: event.Spec{Definition: "test"}, Input: json.RawMessage(`{}`), Seed: "s"})
		b.add(&event.WaitScheduled{WaitID: "pause", Deadline: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)})
		n := 1 + rng.IntN(30)
		var stepCalls []StepCall
		var childCalls []ChildCall
		if round%2 == 0 {
			stepCalls = b.steps(n)
		} else {
			childCalls = b.children(n)
		}
		s, err := Project("r", b.envs)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		v := validation{s: s}
		var got, want Verdict
		var gotErr, wantErr error
		if stepCalls != nil {
			d := ScheduleSteps{Steps: change(rng, stepCalls, func(c *StepCall) {
				if c.ID == "" {
					*c = StepCall{ID: "extra", Name: "work", Input: json.RawMessage(`1`)}
				}
				stepEdits[rng.IntN(len(stepEdits))](c)
			})}
			got, gotErr = v.steps(d)
			want, wantErr = v.stepsInFull(d)
			if _, ok := v.pendingSteps(d); ok {
				recognised["steps"]++
			}
		} else {
			d := StartChildren{Children: change(rng, childCalls, func(c *ChildCall) {
				if c.ID == "" {
					*c = ChildCall{ID: "extra", Definition: "sub", Input: json.RawMessage(`1`)}
				}
				childEdits[rng.IntN(len(childEdits))](c)
			})}
			got, gotErr = v.children(d)
			want, wantErr = v.childrenInFull(d)
			if _, ok := v.pendingChildren(d); ok {
				recognised["children"]++
			}
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErr, wantErr) {
			t.Fatalf("round %d: recognised as pending: %+v, %v; validated in full: %+v, %v", round, got, gotErr, want, wantErr)
		}
	}
	t.Logf("recognised as pending: %v of 3000", recognised)
	if recognised["steps"] < 100 || recognised["children"] < 100 {
		t.Fatalf("too few decisions recognised as pending to compare: %v", recognised)
	}
}
