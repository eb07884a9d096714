package core_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// TestNonDeterminism has one row per field compared on replay (compare.go). Each row
// records a decision, then gives the code a decision that differs in that field only.
func TestNonDeterminism(t *testing.T) {
	t.Parallel()

	deadline := epoch.Add(time.Hour)
	policy5 := event.RetryPolicy{MaxAttempts: 5}
	tests := []struct {
		name string
		// history returns the recorded history.
		history func(t *testing.T) *history
		// check produces the error: Validate on the snapshot (live), or Replay/Decide.
		check     func(h *history) error
		wantKind  string
		wantID    string
		wantField string
		wantSeq   uint64
	}{
		{
			name:     "StepID",
			history:  recorded(scheduled(stepSpec("reserve", "reserveStock", `1`))),
			check:    replayWith(always(core.ScheduleSteps{Steps: []core.StepCall{call("charge", "reserveStock", `1`)}})),
			wantKind: "step", wantID: "reserve", wantField: "step_id", wantSeq: 2,
		},
		{
			name:     "StepName",
			history:  recorded(scheduled(stepSpec("read-rate", "readExchangeRate", `1`))),
			check:    validate(core.ScheduleSteps{Steps: []core.StepCall{call("read-rate", "readRateV2", `1`)}}),
			wantKind: "step", wantID: "read-rate", wantField: "name", wantSeq: 2,
		},
		{
			name:     "StepInput",
			history:  recorded(scheduled(stepSpec("read-rate", "readExchangeRate", `{"pair":"CNY/USD"}`))),
			check:    validate(core.ScheduleSteps{Steps: []core.StepCall{call("read-rate", "readExchangeRate", `{"pair":"EUR/USD"}`)}}),
			wantKind: "step", wantID: "read-rate", wantField: "input", wantSeq: 2,
		},
		{
			name:     "StepInputLargeInteger",
			history:  recorded(scheduled(stepSpec("charge", "chargeCard", `{"cents":9007199254740993}`))),
			check:    validate(core.ScheduleSteps{Steps: []core.StepCall{call("charge", "chargeCard", `{"cents":9007199254740992}`)}}),
			wantKind: "step", wantID: "charge", wantField: "input", wantSeq: 2,
		},
		{
			name:    "StepRetryPolicy",
			history: recorded(scheduled(stepSpec("charge", "chargeCard", `1`))),
			check: validate(core.ScheduleSteps{Steps: []core.StepCall{{ID: "charge", Name: "chargeCard",
				Input: json.RawMessage(`1`), Retry: policy5}}}),
			wantKind: "step", wantID: "charge", wantField: "retry", wantSeq: 2,
		},
		{
			name:     "WaitID",
			history:  recorded(&event.WaitScheduled{WaitID: "cool-down", Deadline: deadline}),
			check:    replayWith(always(core.WaitUntil{ID: "warm-up", Deadline: deadline})),
			wantKind: "wait", wantID: "cool-down", wantField: "wait_id", wantSeq: 2,
		},
		{
			name:     "WaitDeadline",
			history:  recorded(&event.WaitScheduled{WaitID: "cool-down", Deadline: deadline}),
			check:    validate(core.WaitUntil{ID: "cool-down", Deadline: deadline.Add(time.Millisecond)}),
			wantKind: "wait", wantID: "cool-down", wantField: "deadline", wantSeq: 2,
		},
		{
			name:     "WaitDuration",
			history:  recorded(&event.WaitScheduled{WaitID: "cool-down", Deadline: epoch.Add(10 * time.Minute), Duration: event.Duration(10 * time.Minute)}),
			check:    validate(core.Sleep{ID: "cool-down", Duration: 20 * time.Minute}),
			wantKind: "wait", wantID: "cool-down", wantField: "duration", wantSeq: 2,
		},
		{
			name:     "HookID",
			history:  recorded(&event.HookCreated{HookID: "approval", Token: "tok-1"}),
			check:    replayWith(always(core.CreateHook{ID: "sign-off", Token: "tok-1"})),
			wantKind: "hook", wantID: "approval", wantField: "hook_id", wantSeq: 2,
		},
		{
			name:     "HookToken",
			history:  recorded(&event.HookCreated{HookID: "approval", Token: "tok-1"}),
			check:    validate(core.CreateHook{ID: "approval", Token: "tok-2"}),
			wantKind: "hook", wantID: "approval", wantField: "token", wantSeq: 2,
		},
		{
			name:     "HookMetadata",
			history:  recorded(&event.HookCreated{HookID: "approval", Token: "tok-1", Metadata: json.RawMessage(`{"approver":"ops"}`)}),
			check:    validate(core.CreateHook{ID: "approval", Token: "tok-1", Metadata: json.RawMessage(`{"approver":"finance"}`)}),
			wantKind: "hook", wantID: "approval", wantField: "metadata", wantSeq: 2,
		},
		{
			name:     "SignalWaitID",
			history:  recorded(&event.SignalAwaited{WaitID: "payment", Name: "paid"}),
			check:    replayWith(always(core.AwaitSignal{WaitID: "shipment", Name: "paid"})),
			wantKind: "signal_wait", wantID: "payment", wantField: "wait_id", wantSeq: 2,
		},
		{
			name:     "SignalName",
			history:  recorded(&event.SignalAwaited{WaitID: "payment", Name: "paid"}),
			check:    validate(core.AwaitSignal{WaitID: "payment", Name: "payment-received"}),
			wantKind: "signal_wait", wantID: "payment", wantField: "signal_name", wantSeq: 2,
		},
		{
			name:     "ChildID",
			history:  childHistory,
			check:    replayWith(always(core.StartChildren{Children: []core.ChildCall{{ID: "refund", Definition: "payment", Input: json.RawMessage(`{"amount":10}`)}}})),
			wantKind: "child", wantID: "pay", wantField: "child_id", wantSeq: 2,
		},
		{
			name:     "ChildDefinition",
			history:  childHistory,
			check:    validate(core.StartChildren{Children: []core.ChildCall{{ID: "pay", Definition: "paymentV2", Input: json.RawMessage(`{"amount":10}`)}}}),
			wantKind: "child", wantID: "pay", wantField: "definition", wantSeq: 2,
		},
		{
			name:     "ChildInput",
			history:  childHistory,
			check:    validate(core.StartChildren{Children: []core.ChildCall{{ID: "pay", Definition: "payment", Input: json.RawMessage(`{"amount":11}`)}}}),
			wantKind: "child", wantID: "pay", wantField: "input", wantSeq: 2,
		},
		{
			name:    "ChildCancellationPolicy",
			history: childHistory,
			check: validate(core.StartChildren{Children: []core.ChildCall{{ID: "pay", Definition: "payment", Input: json.RawMessage(`{"amount":10}`),
				CancelPolicy: event.CancelPolicyAbandon}}}),
			wantKind: "child", wantID: "pay", wantField: "cancel_policy", wantSeq: 2,
		},
		{
			name:     "ContinueAsNewInput",
			history:  recorded(&event.RunContinuedAsNew{SuccessorRunID: "r=1", Input: json.RawMessage(`{"cursor":100}`)}),
			check:    replayWith(always(core.ContinueAsNew{Input: json.RawMessage(`{"cursor":200}`)})),
			wantKind: "continue_as_new", wantField: "input", wantSeq: 2,
		},
		{
			name: "PatchMarkers",
			history: func(t *testing.T) *history {
				return newHistory(t, "r", event.Spec{Patches: []string{"use-new-pricing"}})
			},
			check: func(h *history) error {
				_, err := core.Decide(h.snapshot(), script{id: core.Identity{Patches: []string{"other"}}, fn: nil}, core.DecideOptions{})
				return err
			},
			wantKind: "run", wantField: "patches", wantSeq: 1,
		},
		{
			name:    "RuntimeBuildID",
			history: func(t *testing.T) *history { return newHistory(t, "r", event.Spec{BuildID: "2026-11-01.1"}) },
			check: func(h *history) error {
				_, err := core.Decide(h.snapshot(), script{id: core.Identity{BuildID: "2026-11-30.4"}}, core.DecideOptions{})
				return err
			},
			wantKind: "run", wantField: "build_id", wantSeq: 1,
		},
		{
			name:    "BatchMembers",
			history: recorded(scheduled(stepSpec("reserve-a", "reserve", `1`), stepSpec("reserve-b", "reserve", `2`))),
			check: validate(core.ScheduleSteps{Steps: []core.StepCall{call("reserve-a", "reserve", `1`), call("reserve-b", "reserve", `2`),
				call("reserve-c", "reserve", `3`)}}),
			wantKind: "step", wantID: "reserve-a", wantField: "members", wantSeq: 2,
		},
		{
			name:     "IdentityKind",
			history:  recorded(scheduled(stepSpec("pause", "notify", `1`))),
			check:    validate(core.Sleep{ID: "pause", Duration: time.Minute}),
			wantKind: "step", wantID: "pause", wantField: "kind", wantSeq: 2,
		},
		{
			name:     "DecisionKind",
			history:  recorded(scheduled(stepSpec("charge", "chargeCard", `1`))),
			check:    replayWith(always(core.Sleep{ID: "cool-down", Duration: time.Minute})),
			wantKind: "decision", wantField: "decision", wantSeq: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.check(tt.history(t))
			require.Error(t, err)
			require.ErrorIs(t, err, core.ErrNonDeterminism)
			var nd *core.NonDeterminismError
			require.True(t, errors.As(err, &nd), "got %T: %v", err, err)
			require.Equal(t, "r", nd.RunID)
			require.Equal(t, tt.wantKind, nd.Kind)
			require.Equal(t, tt.wantID, nd.ID)
			require.Equal(t, tt.wantField, nd.Field)
			require.Equal(t, tt.wantSeq, nd.Seq)
			require.NotEqual(t, nd.Recorded, nd.New)
			msg := err.Error()
			t.Log(msg)
			require.Contains(t, msg, "[FLOW-REPLAY-")
			require.Contains(t, msg, nd.Recorded)
			require.Contains(t, msg, nd.New)
			require.Contains(t, msg, "possible causes")
			require.Contains(t, msg, "what to do")
		})
	}
}

// recorded returns the history of run "r" started with an empty spec, then ps.
func recorded(ps ...event.Payload) func(t *testing.T) *history {
	return func(t *testing.T) *history { return newHistory(t, "r", event.Spec{}).add(ps...) }
}

func childHistory(t *testing.T) *history {
	return newHistory(t, "r", event.Spec{}).add(&event.ChildScheduled{Children: []event.ChildSpec{{ChildID: "pay", RunID: "r=pay",
		Definition: "payment", Input: json.RawMessage(`{"amount":10}`), CancelPolicy: event.CancelPolicyRequest}}})
}

func validate(d core.Decision) func(h *history) error {
	return func(h *history) error {
		_, err := core.Validate(h.snapshot(), d)
		return err
	}
}

func replayWith(d script) func(h *history) error {
	return func(h *history) error {
		_, err := core.Replay(h.run, h.envs, d, core.DecideOptions{})
		return err
	}
}
