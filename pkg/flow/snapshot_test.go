package flow

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// fullSnapshot returns a core projection with a record in every map and list of the view, each
// with its fields set.
func fullSnapshot() *core.Snapshot {
	at := epoch.Add(time.Minute)
	raw := func(s string) json.RawMessage { return json.RawMessage(`"` + s + `"`) }
	errInfo := &event.ErrorInfo{Kind: "k", Message: "m"}
	s := core.New("r1")
	s.Seq, s.Status, s.StartedAt, s.UpdatedAt = 42, core.StatusPaused, epoch, at
	s.Spec = event.Spec{Definition: "d", BuildID: "b", Patches: []string{"p"}}
	s.Input, s.Queue, s.Parent, s.ContinuedFrom, s.Generation = raw("in"), "q", &event.ParentRef{RunID: "p1", ChildID: "c"}, "r0", 2
	s.Steps["st"] = &core.Step{ID: "st", Name: "n", Input: raw("si"), BatchSeq: 3, Status: core.StepRetrying, Attempt: 2,
		RetryDue: at, RetrySeq: 7, Output: raw("so"), Error: errInfo, SideEffectUnknown: true, SettledSeq: 9,
		Cancellation: event.CancelWait, CancelSeq: 8, Held: true}
	s.Waits["w"] = &core.Wait{ID: "w", Deadline: at, Duration: event.Duration(time.Second), Seq: 4, Fired: true, FiredSeq: 5}
	s.SignalWaits["sw"] = &core.SignalWait{ID: "sw", Name: "go", Seq: 6, Signal: 0}
	s.Signals = append(s.Signals, &core.Signal{Name: "go", Payload: raw("sp"), DeliveryID: "d1", Seq: 7, ConsumedBy: "sw"})
	s.Hooks["h"] = &core.Hook{ID: "h", Token: "t", Metadata: raw("hm"), Seq: 8, Received: true, Payload: raw("hp"), DeliveryID: "d2", ReceivedSeq: 9}
	s.Children["c"] = &core.Child{ID: "c", RunID: "r1-c", Definition: "cd", Input: raw("ci"), CancelPolicy: event.CancelPolicyAbandon,
		BuildID: "b", Patches: []string{"p"}, BatchSeq: 10, Settled: true, Outcome: event.OutcomeFailed, EndedRunID: "r1-c",
		Output: raw("co"), Error: errInfo, SettledSeq: 11, Retry: &event.RetryPolicy{MaxAttempts: 2}, Attempt: 1,
		AttemptRunID: "r1-c=1", RetryDue: at, RetrySeq: 12, Cancellation: event.CancelTry, CancelSeq: 13}
	s.CancelRequested, s.CancelReason = true, "why"
	s.Blocked = &core.Blocked{Kind: "k", Code: "c", Detail: "d", BuildID: "b", Seq: 14, Mismatch: &event.Mismatch{Field: "f"}}
	s.Outcome = &core.Outcome{Outcome: event.OutcomeCompleted, Output: raw("out"), Error: errInfo, Reason: "r",
		Cause: event.CauseWorkflow, SuccessorRunID: "r2", Input: raw("next"), Seq: 15, Time: at}
	s.Progress = core.Progress{Events: 42, Decisions: 3, Steps: 1, SignalsReceived: 1, ChildrenSettled: 1}
	s.SideEffects["se"] = &core.SideEffect{ID: "se", Value: raw("sv"), Seq: 16}
	s.Attributes = event.Attributes{"a": {Type: "keyword", Value: json.RawMessage(`"v"`)}}
	s.Upserts = map[string]*core.Upsert{"u": {ID: "u", Attributes: event.Attributes{"a": {Type: "keyword", Value: json.RawMessage(`"v"`)}}, Seq: 17}}
	s.Updates = map[string]*core.Update{"up": {ID: "up", Name: "n", Payload: raw("up"), Seq: 18, Status: core.UpdateCompleted,
		DecidedSeq: 19, Result: raw("ur"), Error: errInfo, SettledSeq: 20}}
	s.Delayed, s.NotBefore, s.NotBeforeSeq, s.Debounced = true, at, 1, 2
	s.Priority, s.Control, s.Admitted, s.AdmittedSeq, s.AdmittedAt = 5, &event.FlowControl{Key: "k", Concurrency: 1}, true, 2, at
	s.Schedule = &event.ScheduleRef{Name: "s"}
	s.Resets = []core.ResetLink{{NewRunID: "r3", Point: 4, Mode: event.ResetRerun, StepID: "st", Reason: "r", DropInputs: true,
		Terminated: true, InputReplaced: true, Seq: 21}}
	s.Paused = &core.Pause{Reason: "r", Cause: event.PauseOperator, By: "ops", Seq: 22, At: at,
		Steps: []core.HeldStep{{StepID: "st", Attempt: 2, Error: *errInfo}}}
	s.Pauses = 1
	return s
}

// TestSnapshotViewMatchesTheWire checks that the view a client decodes from the history
// service's JSON of a projection is the view a workflow's Context shows of it, and that every
// field of the view is a field of the projection's JSON with the same value.
func TestSnapshotViewMatchesTheWire(t *testing.T) {
	t.Parallel()
	s := fullSnapshot()
	wire, err := json.Marshal(s)
	require.NoError(t, err)
	var decoded Snapshot
	require.NoError(t, json.Unmarshal(wire, &decoded))
	require.Equal(t, viewOf(s), &decoded)

	viewJSON, err := json.Marshal(viewOf(s))
	require.NoError(t, err)
	var core, view map[string]any
	require.NoError(t, json.Unmarshal(wire, &core))
	require.NoError(t, json.Unmarshal(viewJSON, &view))
	requireSubset(t, "snapshot", view, core)
}

// requireSubset checks that every key of sub is in super with a value of which the value in sub
// is a subset.
func requireSubset(t *testing.T, path string, sub, super any) {
	t.Helper()
	switch sub := sub.(type) {
	case map[string]any:
		sup, ok := super.(map[string]any)
		require.True(t, ok, "%s: an object in the view, %T in the projection", path, super)
		for k, v := range sub {
			sv, ok := sup[k]
			require.True(t, ok, "%s.%s: in the view, not in the projection's JSON", path, k)
			requireSubset(t, path+"."+k, v, sv)
		}
	case []any:
		sup, ok := super.([]any)
		require.True(t, ok, "%s: a list in the view, %T in the projection", path, super)
		require.Len(t, sup, len(sub), path)
		for i := range sub {
			requireSubset(t, path, sub[i], sup[i])
		}
	default:
		require.Equal(t, super, sub, path)
	}
}

// TestSnapshotPayloadFields checks that the view's payload walk visits what the projection's
// does (core.Snapshot.PayloadFields).
func TestSnapshotPayloadFields(t *testing.T) {
	t.Parallel()
	s := fullSnapshot()
	var want, got []string
	for raw := range s.PayloadFields() {
		want = append(want, string(*raw))
	}
	for raw := range viewOf(s).payloadFields() {
		got = append(got, string(*raw))
	}
	require.ElementsMatch(t, want, got)
}
