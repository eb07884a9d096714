package core_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// TestDerive checks the consequences of one commit against the run's latest snapshot: the commit
// is the events from seq `from` on (or the last event), the snapshot the whole history.
func TestDerive(t *testing.T) {
	t.Parallel()
	due := epoch.Add(time.Hour)
	child := event.ChildSpec{ChildID: "c", RunID: "r=c", Definition: "kid", Input: json.RawMessage(`null`), CancelPolicy: event.CancelPolicyRequest}
	tests := []struct {
		name string
		// build returns the history and the sequence of the commit's first event; the commit
		// runs to commitLast (0: the end of history).
		build      func(h *history) (from, commitLast uint64)
		want       core.Consequences
		wantResume uint64
	}{
		{
			name:  "StartResumes",
			build: func(h *history) (uint64, uint64) { return 1, 0 },
			want:  core.Consequences{Resume: true, TaskSeq: 1},
		},
		{
			name: "StartAlreadyDecidedOn",
			build: func(h *history) (uint64, uint64) {
				h.add(scheduled(stepSpec("a", "f", `1`)))
				return 1, 1
			},
			want: core.Consequences{},
		},
		{
			name: "StepResultDoesNotResume",
			build: func(h *history) (uint64, uint64) {
				h.add(scheduled(stepSpec("a", "f", `1`)), &event.StepCompleted{StepID: "a", Attempt: 1, Output: json.RawMessage(`2`)})
				return 3, 0
			},
			want: core.Consequences{},
		},
		{
			name: "SignalResumesEvenWhileAStepRuns",
			build: func(h *history) (uint64, uint64) {
				h.add(scheduled(stepSpec("a", "f", `1`)), &event.SignalReceived{Name: "go", Payload: json.RawMessage(`1`), DeliveryID: "d1"})
				return 3, 0
			},
			want: core.Consequences{Resume: true, TaskSeq: 3},
		},
		{
			name: "PendingWaitRegistered",
			build: func(h *history) (uint64, uint64) {
				h.add(&event.WaitScheduled{WaitID: "nap", Deadline: due})
				return 2, 0
			},
			want: core.Consequences{Timers: []core.Timer{{RunID: "r", Kind: core.TimerWait, ID: "nap", Due: due, Seq: 2}}},
		},
		{
			name: "FiredWaitNotRegisteredAgain",
			build: func(h *history) (uint64, uint64) {
				h.add(&event.WaitScheduled{WaitID: "nap", Deadline: due}, &event.WaitFired{WaitID: "nap"})
				return 2, 2
			},
			want: core.Consequences{},
		},
		{
			name: "FiredWaitIsMoot",
			build: func(h *history) (uint64, uint64) {
				h.add(&event.WaitScheduled{WaitID: "nap", Deadline: due}, &event.WaitFired{WaitID: "nap"})
				return 3, 0
			},
			want:       core.Consequences{Resume: true, TaskSeq: 3, Moot: []core.Timer{{RunID: "r", Kind: core.TimerWait, ID: "nap"}}},
			wantResume: 3,
		},
		{
			name: "FiredRetryIsMoot",
			build: func(h *history) (uint64, uint64) {
				h.add(scheduled(stepSpec("a", "f", `1`)), &event.StepFailed{StepID: "a", Attempt: 1, Error: event.ErrorInfo{Message: "x"}, Retryable: true},
					&event.StepRetryScheduled{StepID: "a", Attempt: 2, Due: due}, &event.StepRetryFired{StepID: "a", Attempt: 2})
				return 5, 0
			},
			want:       core.Consequences{Resume: true, TaskSeq: 5, Moot: []core.Timer{{RunID: "r", Kind: core.TimerRetry, ID: "a", Attempt: 2}}},
			wantResume: 5,
		},
		{
			name: "RetryRegistered",
			build: func(h *history) (uint64, uint64) {
				h.add(scheduled(stepSpec("a", "f", `1`)),
					&event.StepFailed{StepID: "a", Attempt: 1, Error: event.ErrorInfo{Message: "x"}, Retryable: true},
					&event.StepRetryScheduled{StepID: "a", Attempt: 2, Due: due})
				return 3, 0
			},
			want: core.Consequences{Timers: []core.Timer{{RunID: "r", Kind: core.TimerRetry, ID: "a", Attempt: 2, Due: due, Seq: 4}}},
		},
		{
			name: "ChildrenStarted",
			build: func(h *history) (uint64, uint64) {
				h.add(&event.ChildScheduled{Children: []event.ChildSpec{child}})
				return 2, 0
			},
			want: core.Consequences{Children: []event.ChildSpec{child}},
		},
		{
			name: "SettledChildNotStartedAgain",
			build: func(h *history) (uint64, uint64) {
				h.add(&event.ChildScheduled{Children: []event.ChildSpec{child}},
					&event.ChildSettled{ChildID: "c", RunID: "r=c", Outcome: event.OutcomeCompleted, Output: json.RawMessage(`1`)})
				return 2, 2
			},
			want: core.Consequences{},
		},
		{
			name: "EndMakesTimersMoot",
			build: func(h *history) (uint64, uint64) {
				h.add(scheduled(stepSpec("a", "f", `1`)),
					&event.StepFailed{StepID: "a", Attempt: 1, Error: event.ErrorInfo{Message: "x"}, Retryable: true},
					&event.StepRetryScheduled{StepID: "a", Attempt: 2, Due: due},
					&event.RunCancelRequested{Reason: "stop"},
					&event.StepCancelled{Steps: []event.CancelledStep{{StepID: "a", Attempt: 2}}, Reason: "stop", Cause: event.CauseCancelRequested},
					&event.RunCancelled{Reason: "stop", Cause: event.CauseCancelRequested})
				return 6, 0
			},
			want: core.Consequences{Ended: true, Moot: []core.Timer{{RunID: "r", Kind: core.TimerRetry, ID: "a", Attempt: 2}}},
		},
		{
			name: "CancelRequestResumes",
			build: func(h *history) (uint64, uint64) {
				h.add(&event.WaitScheduled{WaitID: "nap", Deadline: due}, &event.RunCancelRequested{Reason: "stop"})
				return 3, 0
			},
			want: core.Consequences{Resume: true, TaskSeq: 3},
		},
		{
			name: "TerminalRunNeverResumes",
			build: func(h *history) (uint64, uint64) {
				h.add(&event.WaitScheduled{WaitID: "nap", Deadline: due}, &event.RunCancelRequested{Reason: "stop"},
					&event.RunCancelled{Reason: "stop", Cause: event.CauseCancelRequested})
				return 3, 3
			},
			want: core.Consequences{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHistory(t, "r", event.Spec{})
			from, last := tt.build(h)
			if last == 0 {
				last = uint64(len(h.envs))
			}
			got := core.Derive(h.snapshot(), h.envs[from-1:last])
			require.Equal(t, tt.want, got)
		})
	}
}

// The runs index entry changes only when the status or the detail does, and names the event
// that changed it.
func TestSummaryChangesWithStatusOnly(t *testing.T) {
	t.Parallel()
	h := newHistory(t, "r", event.Spec{Definition: "order"})
	require.Equal(t, uint64(1), h.snapshot().Summary().Seq)
	h.add(scheduled(stepSpec("a", "f", `1`)))
	require.Equal(t, core.StatusRunning, h.snapshot().Summary().Status)
	require.Equal(t, uint64(2), h.snapshot().Summary().Seq)
	h.add(&event.StepCompleted{StepID: "a", Attempt: 1, Output: json.RawMessage(`2`)}, scheduled(stepSpec("b", "f", `2`)))
	sum := h.snapshot().Summary()
	require.Equal(t, uint64(2), sum.Seq, "running all along")
	require.Equal(t, h.envs[1].Time, sum.UpdatedAt)
	h.add(&event.DecisionFailed{Kind: "panic", Code: core.CodePanic, Detail: "boom"})
	require.Equal(t, uint64(5), h.snapshot().Summary().Seq)
	h.add(&event.DecisionFailed{Kind: "panic", Code: core.CodePanic, Detail: "boom again"})
	sum = h.snapshot().Summary()
	require.Equal(t, uint64(6), sum.Seq, "a new diagnosis is a new detail")
	require.Equal(t, "boom again", sum.Detail)
}

func TestStampCountsSleepFromItsOwnEvent(t *testing.T) {
	t.Parallel()
	s := newHistory(t, "r", event.Spec{}).snapshot()
	v, err := core.Validate(s, core.Sleep{ID: "nap", Duration: 2 * time.Second})
	require.NoError(t, err)
	at := s.UpdatedAt.Add(300 * time.Millisecond) // a slow step ran since the last event
	core.Stamp(v.Events, at)
	require.Equal(t, at.Add(2*time.Second), v.Events[0].(*event.WaitScheduled).Deadline)

	until := &event.WaitScheduled{WaitID: "w", Deadline: due0}
	core.Stamp([]event.Payload{until}, at)
	require.Equal(t, due0, until.Deadline, "WaitUntil keeps its deadline")
}

var due0 = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

func TestJSONEqualComparesNumbersExactly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want bool
	}{
		{`9007199254740993`, `9007199254740992`, false},
		{`{"id":12345678901234567890}`, `{"id":12345678901234567891}`, false},
		{`1`, `1.0`, true},
		{`1.5e3`, `1500`, true},
		{`-0`, `0`, true},
		{`100`, `1e2`, true},
		{`0.1`, `1e-1`, true},
		{`1e999999999`, `1e999999999`, true},
		{`1e999999999`, `2e999999999`, false},
		{`[1,2]`, `[1, 2]`, true},
		{`{"a":1,"b":[true,null,"x"]}`, `{"b":[true,null,"x"],"a":1}`, true},
		{`{"a":1}`, `{"a":"1"}`, false},
		{`{"a":1}`, `{"a":1,"b":2}`, false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, core.JSONEqual(json.RawMessage(tt.a), json.RawMessage(tt.b)), "%s vs %s", tt.a, tt.b)
	}
}
