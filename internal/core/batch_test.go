package core_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// bigBatch is the size of the batches of TestReissuedBatch: more members than a batch's
// repeated-ID check scans before it hashes.
const bigBatch = 40

// bigBatchHistory records a batch of bigBatch steps "m-0".."m-39" (step "work" on {"i":k}) at
// seq 2, a wait "pause" at seq 3, and the completion of the first 10 members.
func bigBatchHistory(t *testing.T) *history {
	specs := make([]event.StepSpec, bigBatch)
	for i := range specs {
		specs[i] = stepSpec(fmt.Sprintf("m-%d", i), "work", fmt.Sprintf(`{"i":%d}`, i))
	}
	h := newHistory(t, "r", event.Spec{}).add(scheduled(specs...), &event.WaitScheduled{WaitID: "pause", Deadline: epoch.Add(1e12)})
	for i := range 10 {
		h.add(&event.StepCompleted{StepID: fmt.Sprintf("m-%d", i), Attempt: 1, Output: json.RawMessage(`"ok"`)})
	}
	return h
}

// bigBatchCalls returns the decision that re-issues bigBatchHistory's batch as recorded, after
// change has changed its members.
func bigBatchCalls(change func(calls []core.StepCall) []core.StepCall) core.ScheduleSteps {
	calls := make([]core.StepCall, bigBatch)
	for i := range calls {
		calls[i] = call(fmt.Sprintf("m-%d", i), "work", fmt.Sprintf(`{"i":%d}`, i))
	}
	if change != nil {
		calls = change(calls)
	}
	return core.ScheduleSteps{Steps: calls}
}

// TestReissuedBatch covers a large batch re-issued while it is pending: identical, or different
// in one member's field, in its members' order or number, or listing an ID twice. Each row names
// what Validate must answer: the wait, a non-determinism error (kind, ID, field, recorded, new,
// seq), or an invalid decision.
func TestReissuedBatch(t *testing.T) {
	t.Parallel()
	type mismatch struct{ kind, id, field, recorded, produced string }
	tests := []struct {
		name     string
		decision core.Decision
		// One of:
		waitingOn string
		mismatch  *mismatch
		invalid   string
	}{
		{name: "Identical", decision: bigBatchCalls(nil), waitingOn: `step "m-10"`},
		{name: "InputReformatted", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[25].Input = json.RawMessage(` { "i" : 25 } `)
			return c
		}), waitingOn: `step "m-10"`},
		{name: "InputEqualAsValue", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[25].Input = json.RawMessage(`{"i":25.0}`)
			return c
		}), waitingOn: `step "m-10"`},
		{name: "DefaultRetryPolicyGiven", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[12].Retry = event.RetryPolicy{}.Normalize()
			c[13].Retry = event.RetryPolicy{MaxAttempts: event.DefaultMaxAttempts}
			return c
		}), waitingOn: `step "m-10"`},
		{name: "InputChanged", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[25].Input = json.RawMessage(`{"i":26}`)
			return c
		}), mismatch: &mismatch{"step", "m-25", "input", `{"i":25}`, `{"i":26}`}},
		{name: "InputChangedInCompletedMember", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[3].Input = json.RawMessage(`{"i":-3}`)
			return c
		}), mismatch: &mismatch{"step", "m-3", "input", `{"i":3}`, `{"i":-3}`}},
		{name: "NameChanged", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[30].Name = "workV2"
			return c
		}), mismatch: &mismatch{"step", "m-30", "name", `"work"`, `"workV2"`}},
		{name: "RetryChanged", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[5].Retry = event.RetryPolicy{MaxAttempts: 5}
			return c
		}), mismatch: &mismatch{kind: "step", id: "m-5", field: "retry"}},
		{name: "FirstDifferenceIsReported", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[33].Input = json.RawMessage(`0`)
			c[20].Name = "other"
			return c
		}), mismatch: &mismatch{"step", "m-20", "name", `"work"`, `"other"`}},
		{name: "OrderChanged", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[3], c[4] = c[4], c[3]
			return c
		}), mismatch: &mismatch{kind: "step", id: "m-0", field: "members"}},
		{name: "ExtraMember", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			return append(c, call("m-40", "work", `{"i":40}`))
		}), mismatch: &mismatch{kind: "step", id: "m-0", field: "members"}},
		{name: "MissingMember", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			return slices.Delete(c, 17, 18)
		}), mismatch: &mismatch{kind: "step", id: "m-0", field: "members"}},
		{name: "MissingFirstMember", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			return c[1:]
		}), mismatch: &mismatch{kind: "step", id: "m-0", field: "members"}},
		{name: "NewFirstMember", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			return append([]core.StepCall{call("fresh", "work", `1`)}, c...)
		}), mismatch: &mismatch{kind: "step", id: "m-0", field: "members"}},
		{name: "MemberRecordedAsAnotherKind", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[39].ID = "pause"
			return c
		}), mismatch: &mismatch{kind: "wait", id: "pause", field: "kind", recorded: "wait", produced: "step"}},
		{name: "DuplicateMemberID", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[39].ID = "m-7"
			return c
		}), invalid: `step ID "m-7" appears twice in one batch`},
		{name: "DuplicateBeforeOtherDifferences", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[2].Input = json.RawMessage(`"changed"`)
			c[38].ID = "m-1"
			return c
		}), invalid: `step ID "m-1" appears twice in one batch`},
		{name: "InputNotJSON", decision: bigBatchCalls(func(c []core.StepCall) []core.StepCall {
			c[11].Input = json.RawMessage(`{"i":`)
			return c
		}), invalid: `step "m-11" input is not valid JSON`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := core.Validate(bigBatchHistory(t).snapshot(), tt.decision)
			switch {
			case tt.waitingOn != "":
				require.NoError(t, err)
				require.True(t, v.Waiting())
				require.Equal(t, tt.waitingOn, v.WaitingOn)
			case tt.mismatch != nil:
				var nd *core.NonDeterminismError
				require.True(t, errors.As(err, &nd), "got %v", err)
				require.Equal(t, "r", nd.RunID)
				require.Equal(t, tt.mismatch.kind, nd.Kind)
				require.Equal(t, tt.mismatch.id, nd.ID)
				require.Equal(t, tt.mismatch.field, nd.Field)
				wantSeq := uint64(2)
				if tt.mismatch.kind == "wait" {
					wantSeq = 3
				}
				require.Equal(t, wantSeq, nd.Seq)
				if tt.mismatch.recorded != "" {
					require.Equal(t, tt.mismatch.recorded, nd.Recorded)
					require.Equal(t, tt.mismatch.produced, nd.New)
				}
				// The members of a large batch render truncated (renderLimit), alike when they
				// differ after the limit.
			default:
				var inv *core.InvalidDecisionError
				require.True(t, errors.As(err, &inv), "got %v", err)
				require.Equal(t, core.CodeInvalidDecision, inv.Code)
				require.Contains(t, inv.Detail, tt.invalid)
			}
		})
	}

	t.Run("MembersRecordedAndProduced", func(t *testing.T) {
		t.Parallel()
		_, err := core.Validate(bigBatchHistory(t).snapshot(), bigBatchCalls(func(c []core.StepCall) []core.StepCall { return c[:2] }))
		var nd *core.NonDeterminismError
		require.True(t, errors.As(err, &nd))
		require.True(t, strings.HasPrefix(nd.Recorded, `["m-0","m-1","m-2",`), nd.Recorded)
		require.Equal(t, `["m-0","m-1"]`, nd.New)
	})

	t.Run("AllSettledIsRefused", func(t *testing.T) {
		t.Parallel()
		h := bigBatchHistory(t)
		for i := 10; i < bigBatch; i++ {
			h.add(&event.StepCompleted{StepID: fmt.Sprintf("m-%d", i), Attempt: 1, Output: json.RawMessage(`"ok"`)})
		}
		_, err := core.Validate(h.snapshot(), bigBatchCalls(nil))
		var inv *core.InvalidDecisionError
		require.True(t, errors.As(err, &inv), "got %v", err)
		require.Equal(t, core.CodeAlreadySettled, inv.Code)
		require.Contains(t, inv.Detail, `step "m-0" already completed at seq 4`)
	})

	t.Run("WaitsOnFirstUnsettledInBatchOrder", func(t *testing.T) {
		t.Parallel()
		h := bigBatchHistory(t)
		for _, i := range []int{10, 11, 13} {
			h.add(&event.StepCompleted{StepID: fmt.Sprintf("m-%d", i), Attempt: 1, Output: json.RawMessage(`"ok"`)})
		}
		v, err := core.Validate(h.snapshot(), bigBatchCalls(nil))
		require.NoError(t, err)
		require.Equal(t, `step "m-12"`, v.WaitingOn)
	})

	t.Run("NewBatchWithDuplicateID", func(t *testing.T) {
		t.Parallel()
		calls := make([]core.StepCall, bigBatch)
		for i := range calls {
			calls[i] = call(fmt.Sprintf("n-%d", i), "work", `1`)
		}
		calls[35].ID = "n-20"
		_, err := core.Validate(newHistory(t, "r", event.Spec{}).snapshot(), core.ScheduleSteps{Steps: calls})
		require.ErrorIs(t, err, core.ErrInvalidDecision)
		require.ErrorContains(t, err, `step ID "n-20" appears twice in one batch; give every step its own ID`)
	})

	t.Run("HistoryListingAnIDTwice", func(t *testing.T) {
		t.Parallel()
		specs := make([]event.StepSpec, bigBatch)
		for i := range specs {
			specs[i] = stepSpec(fmt.Sprintf("n-%d", i), "work", `1`)
		}
		specs[30].ID = "n-29"
		h := newHistory(t, "r", event.Spec{})
		h.envs = append(h.envs, event.Envelope{RunID: "r", Seq: 2, Time: h.now, Payload: scheduled(specs...)})
		_, err := core.Project("r", h.envs)
		var he *core.HistoryError
		require.True(t, errors.As(err, &he), "got %v", err)
		require.Equal(t, "duplicate_id", he.Rule)
		require.Contains(t, he.Detail, `lists ID "n-29" twice`)
	})
}

// TestReissuedChildren covers a batch of children re-issued while it is pending.
func TestReissuedChildren(t *testing.T) {
	t.Parallel()
	history := func(t *testing.T) *history {
		specs := make([]event.ChildSpec, bigBatch)
		for i := range specs {
			id := fmt.Sprintf("c-%d", i)
			specs[i] = event.ChildSpec{ChildID: id, RunID: event.ChildRunID("r", id), Definition: "sub",
				Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), CancelPolicy: event.CancelPolicyRequest}
		}
		h := newHistory(t, "r", event.Spec{}).add(&event.ChildScheduled{Children: specs})
		return h.add(&event.ChildSettled{ChildID: "c-0", RunID: "r=c-0", Outcome: event.OutcomeCompleted, Output: json.RawMessage(`1`)})
	}
	calls := func(change func(c []core.ChildCall)) core.StartChildren {
		c := make([]core.ChildCall, bigBatch)
		for i := range c {
			c[i] = core.ChildCall{ID: fmt.Sprintf("c-%d", i), Definition: "sub", Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		}
		if change != nil {
			change(c)
		}
		return core.StartChildren{Children: c}
	}
	t.Run("Identical", func(t *testing.T) {
		t.Parallel()
		v, err := core.Validate(history(t).snapshot(), calls(func(c []core.ChildCall) { c[7].CancelPolicy = event.CancelPolicyRequest }))
		require.NoError(t, err)
		require.Equal(t, `child "c-1" (run "r=c-1")`, v.WaitingOn)
	})
	for _, tt := range []struct {
		name, id, field string
		change          func(c []core.ChildCall)
	}{
		{"InputChanged", "c-21", "input", func(c []core.ChildCall) { c[21].Input = json.RawMessage(`{"i":0}`) }},
		{"DefinitionChanged", "c-2", "definition", func(c []core.ChildCall) { c[2].Definition = "subV2" }},
		{"PolicyChanged", "c-9", "cancel_policy", func(c []core.ChildCall) { c[9].CancelPolicy = event.CancelPolicyAbandon }},
		{"OrderChanged", "c-0", "members", func(c []core.ChildCall) { c[0], c[1] = c[1], c[0] }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := core.Validate(history(t).snapshot(), calls(tt.change))
			var nd *core.NonDeterminismError
			require.True(t, errors.As(err, &nd), "got %v", err)
			require.Equal(t, "child", nd.Kind)
			require.Equal(t, tt.id, nd.ID)
			require.Equal(t, tt.field, nd.Field)
			require.Equal(t, uint64(2), nd.Seq)
		})
	}
	t.Run("DuplicateChildID", func(t *testing.T) {
		t.Parallel()
		_, err := core.Validate(history(t).snapshot(), calls(func(c []core.ChildCall) { c[30].ID = "c-4" }))
		require.ErrorIs(t, err, core.ErrInvalidDecision)
		require.ErrorContains(t, err, `child ID "c-4" appears twice in one batch`)
	})
}

// TestInFlightAttempts: the attempts in flight come in scheduling order, batch by batch and
// member by member, without the ones waiting out a backoff or settled; a loop may stop early.
func TestInFlightAttempts(t *testing.T) {
	t.Parallel()
	h := newHistory(t, "r", event.Spec{}).
		add(scheduled(stepSpec("a", "work", `1`), stepSpec("b", "work", `2`), stepSpec("c", "work", `3`))).
		add(scheduled(stepSpec("d", "work", `4`), stepSpec("e", "work", `5`))).
		add(&event.StepCompleted{StepID: "b", Attempt: 1, Output: json.RawMessage(`1`)}).
		add(&event.StepFailed{StepID: "d", Attempt: 1, Error: event.ErrorInfo{Message: "flaky"}, Retryable: true},
			&event.StepRetryScheduled{StepID: "d", Attempt: 2, Due: epoch.Add(1e12)})
	s := h.snapshot()
	ids := func(as []core.Attempt) []string {
		out := make([]string, len(as))
		for i, a := range as {
			out[i] = a.StepID
		}
		return out
	}
	require.Equal(t, []string{"a", "c", "e"}, ids(core.Attempts(s)))
	require.Equal(t, []string{"a", "c", "e"}, s.InFlight())
	require.Equal(t, []string{"a", "c", "d", "e"}, s.Unsettled())
	var first []core.Attempt
	for a := range core.InFlightAttempts(s) {
		first = append(first, a)
		if len(first) == 2 {
			break
		}
	}
	require.Equal(t, []string{"a", "c"}, ids(first))
	require.Equal(t, core.Attempt{RunID: "r", StepID: "c", Name: "work", Attempt: 1, Input: json.RawMessage(`3`)}, first[1])

	s = h.add(&event.StepRetryFired{StepID: "d", Attempt: 2}).snapshot()
	require.Equal(t, []string{"a", "c", "d", "e"}, ids(core.Attempts(s)), "a retry in flight keeps its place")
	require.Equal(t, 2, s.Steps["c"].Position())
	require.Equal(t, 0, s.Steps["d"].Position())
}
