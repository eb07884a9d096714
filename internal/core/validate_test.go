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

func TestValidateVerdicts(t *testing.T) {
	t.Parallel()

	t.Run("NewStepIsScheduledNormalized", func(t *testing.T) {
		t.Parallel()
		s := newHistory(t, "r", event.Spec{}).snapshot()
		v, err := core.Validate(s, core.ScheduleSteps{Steps: []core.StepCall{call("read-rate", "readExchangeRate", ` { "pair" : "CNY/USD" } `)}})
		require.NoError(t, err)
		require.False(t, v.Waiting())
		require.Equal(t, []event.Payload{scheduled(stepSpec("read-rate", "readExchangeRate", `{"pair":"CNY/USD"}`))}, v.Events)
	})

	t.Run("IdenticalReissueWaits", func(t *testing.T) {
		t.Parallel()
		s := newHistory(t, "r", event.Spec{}).add(scheduled(stepSpec("read-rate", "readExchangeRate", `{"a":1,"b":[1,2]}`))).snapshot()
		v, err := core.Validate(s, core.ScheduleSteps{Steps: []core.StepCall{call("read-rate", "readExchangeRate", `{"b":[1,2],"a":1}`)}})
		require.NoError(t, err, "JSON is compared as a value: key order does not matter")
		require.True(t, v.Waiting())
		require.Equal(t, `step "read-rate"`, v.WaitingOn)
	})

	t.Run("PartlySettledBatchWaits", func(t *testing.T) {
		t.Parallel()
		s := newHistory(t, "r", event.Spec{}).
			add(scheduled(stepSpec("a", "work", `1`), stepSpec("b", "work", `2`))).
			add(&event.StepCompleted{StepID: "a", Attempt: 1, Output: json.RawMessage(`"ok"`)}).snapshot()
		v, err := core.Validate(s, core.ScheduleSteps{Steps: []core.StepCall{call("a", "work", `1`), call("b", "work", `2`)}})
		require.NoError(t, err)
		require.Equal(t, `step "b"`, v.WaitingOn)
	})

	t.Run("SleepReissuedLaterStillWaits", func(t *testing.T) {
		t.Parallel()
		h := newHistory(t, "r", event.Spec{})
		s := h.snapshot()
		v, err := core.Validate(s, core.Sleep{ID: "cool-down", Duration: 10 * time.Minute})
		require.NoError(t, err)
		w := v.Events[0].(*event.WaitScheduled)
		require.Equal(t, s.UpdatedAt.Add(10*time.Minute), w.Deadline, "Sleep counts from the latest event's time")
		s = h.add(w).add(&event.SignalReceived{Name: "poke", Payload: json.RawMessage(`1`), DeliveryID: "d1"}).snapshot()
		v, err = core.Validate(s, core.Sleep{ID: "cool-down", Duration: 10 * time.Minute})
		require.NoError(t, err)
		require.True(t, v.Waiting(), "a later Now does not move a recorded sleep")
	})

	t.Run("AwaitSignalBindsBufferedSignal", func(t *testing.T) {
		t.Parallel()
		h := newHistory(t, "r", event.Spec{}).add(&event.SignalReceived{Name: "paid", Payload: json.RawMessage(`{"amount":10}`), DeliveryID: "d1"})
		v, err := core.Validate(h.snapshot(), core.AwaitSignal{WaitID: "payment", Name: "paid"})
		require.NoError(t, err)
		s := h.add(v.Events...).snapshot()
		require.True(t, s.SignalWaits["payment"].Received())
		require.Equal(t, "payment", s.Signals[0].ConsumedBy)
		require.Equal(t, core.StatusRunning, s.Status, "the wait is satisfied at once")
	})

	t.Run("CompleteCancelsUnsettledStepsFirst", func(t *testing.T) {
		t.Parallel()
		s := newHistory(t, "r", event.Spec{}).add(scheduled(stepSpec("notify", "sendEmail", `1`))).snapshot()
		v, err := core.Validate(s, core.Complete{Output: json.RawMessage(`"done"`)})
		require.NoError(t, err)
		require.Len(t, v.Events, 2)
		c := v.Events[0].(*event.StepCancelled)
		require.Equal(t, []event.CancelledStep{{StepID: "notify", Attempt: 1, SideEffectUnknown: true}}, c.Steps)
		require.Equal(t, event.CauseWorkflow, c.Cause)
		require.Equal(t, event.TypeRunCompleted, v.Events[1].EventType())
	})

	t.Run("ContinueAsNewDerivesSuccessor", func(t *testing.T) {
		t.Parallel()
		s := newHistory(t, "poll", event.Spec{}).snapshot()
		v, err := core.Validate(s, core.ContinueAsNew{Input: json.RawMessage(`{"cursor":1}`)})
		require.NoError(t, err)
		require.Equal(t, "poll=1", v.Events[0].(*event.RunContinuedAsNew).SuccessorRunID)
		require.Equal(t, "poll=3", event.SuccessorRunID("poll=2", 3))
		require.Equal(t, "p=child=2", event.SuccessorRunID("p=child=1", 2))
	})

	t.Run("DerivedHookTokensAreStableAndDistinct", func(t *testing.T) {
		t.Parallel()
		a := core.HookToken("seed", "r", "approval")
		require.Equal(t, a, core.HookToken("seed", "r", "approval"))
		require.Len(t, a, 32)
		require.NotEqual(t, a, core.HookToken("seed", "r", "sign-off"))
		require.NotEqual(t, a, core.HookToken("other-seed", "r", "approval"))
		require.NoError(t, event.ValidateRunID(a), "tokens are subject-safe")
	})

	t.Run("TerminalRunTakesNoDecision", func(t *testing.T) {
		t.Parallel()
		s := newHistory(t, "r", event.Spec{}).add(&event.RunCompleted{Output: json.RawMessage(`1`)}).snapshot()
		_, err := core.Validate(s, core.Complete{Output: json.RawMessage(`1`)})
		require.ErrorIs(t, err, core.ErrTerminal)
	})
}

func TestValidateRejectsSettledReissue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		history  func(t *testing.T) *history
		decision core.Decision
		want     string
	}{
		{
			name: "Step",
			history: func(t *testing.T) *history {
				return newHistory(t, "r", event.Spec{}).add(scheduled(stepSpec("read-rate", "readExchangeRate", `1`)),
					&event.StepCompleted{StepID: "read-rate", Attempt: 1, Output: json.RawMessage(`0.13`)})
			},
			decision: core.ScheduleSteps{Steps: []core.StepCall{call("read-rate", "readExchangeRate", `1`)}},
			want:     `step "read-rate" already completed at seq 3`,
		},
		{
			name: "Wait",
			history: func(t *testing.T) *history {
				return newHistory(t, "r", event.Spec{}).add(&event.WaitScheduled{WaitID: "w", Deadline: epoch}, &event.WaitFired{WaitID: "w"})
			},
			decision: core.WaitUntil{ID: "w", Deadline: epoch},
			want:     `wait "w" already fired at seq 3`,
		},
		{
			name: "Signal",
			history: func(t *testing.T) *history {
				return newHistory(t, "r", event.Spec{}).add(&event.SignalAwaited{WaitID: "w", Name: "go"},
					&event.SignalReceived{Name: "go", Payload: json.RawMessage(`1`), DeliveryID: "d"})
			},
			decision: core.AwaitSignal{WaitID: "w", Name: "go"},
			want:     `signal wait "w" already received signal "go" at seq 3`,
		},
		{
			name: "Hook",
			history: func(t *testing.T) *history {
				return newHistory(t, "r", event.Spec{}).add(&event.HookCreated{HookID: "h", Token: "tok"},
					&event.HookReceived{HookID: "h", Payload: json.RawMessage(`1`), DeliveryID: "d"})
			},
			decision: core.CreateHook{ID: "h", Token: "tok"},
			want:     `hook "h" already received its delivery at seq 3`,
		},
		{
			name: "Child",
			history: func(t *testing.T) *history {
				return childHistory(t).add(&event.ChildSettled{ChildID: "pay", RunID: "r=pay", Outcome: event.OutcomeCompleted, Output: json.RawMessage(`1`)})
			},
			decision: core.StartChildren{Children: []core.ChildCall{{ID: "pay", Definition: "payment", Input: json.RawMessage(`{"amount":10}`)}}},
			want:     `child "pay" already completed at seq 3`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := core.Validate(tt.history(t).snapshot(), tt.decision)
			require.ErrorIs(t, err, core.ErrInvalidDecision)
			var inv *core.InvalidDecisionError
			require.True(t, errors.As(err, &inv))
			require.Equal(t, core.CodeAlreadySettled, inv.Code)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestValidateRejectsBadDecisions: every malformed decision is a clear error, never a panic.
func TestValidateRejectsBadDecisions(t *testing.T) {
	t.Parallel()
	withHook := func(t *testing.T) *core.Snapshot {
		return newHistory(t, "r", event.Spec{}).add(&event.HookCreated{HookID: "first", Token: "shared-token"}).snapshot()
	}
	plain := func(t *testing.T) *core.Snapshot { return newHistory(t, "r", event.Spec{}).snapshot() }
	tests := []struct {
		name     string
		snapshot func(t *testing.T) *core.Snapshot
		decision core.Decision
		code     string
		want     string
	}{
		{"NoDecision", plain, nil, core.CodeNoDecision, "the workflow returned no decision"},
		{"EmptyBatch", plain, core.ScheduleSteps{}, core.CodeInvalidDecision, "needs at least one step"},
		{"EmptyStepID", plain, core.ScheduleSteps{Steps: []core.StepCall{call("", "work", `1`)}}, core.CodeInvalidDecision, "step ID is empty"},
		{"StepIDWithDot", plain, core.ScheduleSteps{Steps: []core.StepCall{call("a.b", "work", `1`)}}, core.CodeInvalidDecision, `has '.' at position 1`},
		{"StepIDStartsWithDigit", plain, core.ScheduleSteps{Steps: []core.StepCall{call("1st", "work", `1`)}}, core.CodeInvalidDecision, "must start with a letter"},
		{"DuplicateStepID", plain, core.ScheduleSteps{Steps: []core.StepCall{call("a", "work", `1`), call("a", "work", `2`)}}, core.CodeInvalidDecision, `step ID "a" appears twice`},
		{"EmptyStepName", plain, core.ScheduleSteps{Steps: []core.StepCall{call("a", "", `1`)}}, core.CodeInvalidDecision, "step name is empty"},
		{"InputNotJSON", plain, core.ScheduleSteps{Steps: []core.StepCall{call("a", "work", `{"pair":`)}}, core.CodeInvalidDecision, `step "a" input is not valid JSON`},
		{"InputThatDidNotEncode", plain, core.Invalid{What: `input of step "a"`, Err: errors.New("json: unsupported type: chan int")}, core.CodeInvalidDecision, "unsupported type"},
		{"BadRetryPolicy", plain, core.ScheduleSteps{Steps: []core.StepCall{{ID: "a", Name: "work", Input: json.RawMessage(`1`),
			Retry: event.RetryPolicy{BackoffCoefficient: 0.5}}}}, core.CodeInvalidDecision, "retry.backoff_coefficient must be a finite number of at least 1"},
		{"SleepNotPositive", plain, core.Sleep{ID: "w", Duration: -time.Second}, core.CodeInvalidDecision, "needs a positive duration"},
		{"WaitUntilNoDeadline", plain, core.WaitUntil{ID: "w"}, core.CodeInvalidDecision, "has no deadline"},
		{"SignalWithoutName", plain, core.AwaitSignal{WaitID: "w"}, core.CodeInvalidDecision, "signal name is empty"},
		{"HookTokenWithSpace", plain, core.CreateHook{ID: "h", Token: "my token"}, core.CodeInvalidDecision, `hook "h" token`},
		{"HookTokenReused", withHook, core.CreateHook{ID: "second", Token: "shared-token"}, core.CodeInvalidDecision, `already used by hook "first"`},
		{"HookMetadataNotJSON", plain, core.CreateHook{ID: "h", Metadata: json.RawMessage(`{oops}`)}, core.CodeInvalidDecision, "metadata is not valid JSON"},
		{"ChildBadPolicy", plain, core.StartChildren{Children: []core.ChildCall{{ID: "c", Definition: "d", CancelPolicy: "kill"}}}, core.CodeInvalidDecision, "cancel policy must be request_cancel or abandon"},
		{"DuplicateChildID", plain, core.StartChildren{Children: []core.ChildCall{{ID: "c", Definition: "d"}, {ID: "c", Definition: "d"}}}, core.CodeInvalidDecision, `child ID "c" appears twice`},
		{"CompleteNotJSON", plain, core.Complete{Output: json.RawMessage(`nope`)}, core.CodeInvalidDecision, "Complete output is not valid JSON"},
		{"CancelWithOperatorCause", plain, core.Cancel{Cause: event.CauseOperator}, core.CodeInvalidDecision, "Cancel cause must be workflow or cancel_requested"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := tt.snapshot(t)
			var err error
			require.NotPanics(t, func() { _, err = core.Validate(s, tt.decision) })
			require.ErrorIs(t, err, core.ErrInvalidDecision)
			var inv *core.InvalidDecisionError
			require.True(t, errors.As(err, &inv))
			require.Equal(t, tt.code, inv.Code)
			require.Contains(t, err.Error(), tt.want)
			require.Contains(t, err.Error(), `run "r"`)
		})
	}
}

// TestBatchFailure: when a batch member exhausts its retries and its policy ends the run, every
// unsettled sibling is cancelled first, marked side-effect-unknown when its attempt may have run,
// and only then the run fails.
func TestBatchFailure(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T, policy event.RetryPolicy) *history {
		t.Helper()
		spec := func(id string) event.StepSpec {
			s := stepSpec(id, "reserve", `{"sku":"`+id+`"}`)
			s.Retry = policy.Normalize()
			return s
		}
		return newHistory(t, "order-1", event.Spec{}).
			add(scheduled(spec("sku-1"), spec("sku-2"), spec("sku-3"), spec("sku-4"))).
			add(&event.StepCompleted{StepID: "sku-1", Attempt: 1, Output: json.RawMessage(`"ok"`)}).
			// sku-3 failed once and waits out its backoff: its next attempt has not started.
			add(&event.StepFailed{StepID: "sku-3", Attempt: 1, Error: event.ErrorInfo{Kind: "timeout", Message: "slow"}, Retryable: true},
				&event.StepRetryScheduled{StepID: "sku-3", Attempt: 2, Due: epoch.Add(time.Hour)}).
			// sku-2 fails for good.
			add(&event.StepFailed{StepID: "sku-2", Attempt: 1, Error: event.ErrorInfo{Kind: "out_of_stock", Message: "no stock"}, Final: true})
	}

	t.Run("CancelsUnsettledSiblingsThenFails", func(t *testing.T) {
		t.Parallel()
		h := setup(t, event.RetryPolicy{NonRetryable: []string{"out_of_stock"}})
		v, err := core.Decide(h.snapshot(), always(nil), core.DecideOptions{})
		require.NoError(t, err, "the code is not asked: the run ends by policy")
		require.Len(t, v.Events, 2)
		c := v.Events[0].(*event.StepCancelled)
		require.Equal(t, event.CauseStepExhausted, c.Cause)
		require.Contains(t, c.Reason, `step "sku-2" failed for the last time`)
		require.Equal(t, []event.CancelledStep{
			{StepID: "sku-3", Attempt: 2, SideEffectUnknown: false},
			{StepID: "sku-4", Attempt: 1, SideEffectUnknown: true},
		}, c.Steps)
		f := v.Events[1].(*event.RunFailed)
		require.Equal(t, event.CauseStepExhausted, f.Cause)
		require.Equal(t, "out_of_stock", f.Error.Kind)
		require.Contains(t, f.Error.Message, `step "sku-2" (reserve) failed after 1 attempt(s): no stock`)

		s := h.add(v.Events...).snapshot()
		require.Equal(t, core.StatusFailed, s.Status)
		require.Empty(t, core.Check(h.run, h.envs))
		require.True(t, s.Steps["sku-4"].SideEffectUnknown)
	})

	t.Run("ReturnErrorHandsFailureToWorkflow", func(t *testing.T) {
		t.Parallel()
		h := setup(t, event.RetryPolicy{OnExhaustion: event.ExhaustionReturnError})
		asked := false
		v, err := core.Decide(h.snapshot(), script{fn: func(s *core.Snapshot) core.Decision {
			asked = true
			require.Equal(t, core.StepFailed, s.Steps["sku-2"].Status)
			return core.Fail{Error: event.ErrorInfo{Kind: "out_of_stock", Message: "giving up"}}
		}}, core.DecideOptions{})
		require.NoError(t, err)
		require.True(t, asked)
		require.Equal(t, event.TypeStepCancelled, v.Events[0].EventType())
		require.Equal(t, event.CauseWorkflow, v.Events[1].(*event.RunFailed).Cause)
	})
}

func TestStepResult(t *testing.T) {
	t.Parallel()
	failure := &event.ErrorInfo{Kind: "timeout", Message: "upstream timed out"}
	now := epoch.Add(time.Hour)
	setup := func(t *testing.T, policy event.RetryPolicy) *history {
		spec := stepSpec("charge", "chargeCard", `1`)
		spec.Retry = policy.Normalize()
		return newHistory(t, "r", event.Spec{}).add(scheduled(spec))
	}

	t.Run("Completes", func(t *testing.T) {
		t.Parallel()
		ev, err := core.StepResult(setup(t, event.RetryPolicy{}).snapshot(), "charge", 1, core.StepOutcome{Output: json.RawMessage(` {"id": 7} `)}, now)
		require.NoError(t, err)
		require.Equal(t, []event.Payload{&event.StepCompleted{StepID: "charge", Attempt: 1, Output: json.RawMessage(`{"id":7}`)}}, ev)
	})

	t.Run("SchedulesRetryWithBackoff", func(t *testing.T) {
		t.Parallel()
		h := setup(t, event.RetryPolicy{MaxAttempts: 4, InitialInterval: 2 * time.Second, BackoffCoefficient: 3, MaxInterval: 10 * time.Second})
		wantDue := []time.Duration{2 * time.Second, 6 * time.Second, 10 * time.Second}
		for attempt := 1; attempt <= 4; attempt++ {
			ev, err := core.StepResult(h.snapshot(), "charge", attempt, core.StepOutcome{Err: failure}, now)
			require.NoError(t, err)
			f := ev[0].(*event.StepFailed)
			if attempt == 4 {
				require.True(t, f.Final, "no attempt left")
				require.Len(t, ev, 1)
				break
			}
			require.False(t, f.Final)
			r := ev[1].(*event.StepRetryScheduled)
			require.Equal(t, attempt+1, r.Attempt)
			require.Equal(t, now.Add(wantDue[attempt-1]), r.Due)
			h.add(ev...).add(&event.StepRetryFired{StepID: "charge", Attempt: attempt + 1})
		}
	})

	t.Run("NonRetryableKindIsFinal", func(t *testing.T) {
		t.Parallel()
		h := setup(t, event.RetryPolicy{NonRetryable: []string{"card_declined"}})
		ev, err := core.StepResult(h.snapshot(), "charge", 1, core.StepOutcome{Err: &event.ErrorInfo{Kind: "card_declined", Message: "declined"}}, now)
		require.NoError(t, err)
		require.Equal(t, &event.StepFailed{StepID: "charge", Attempt: 1, Error: event.ErrorInfo{Kind: "card_declined", Message: "declined"}, Final: true}, ev[0])
		ev, err = core.StepResult(h.snapshot(), "charge", 1, core.StepOutcome{Err: failure, NonRetryable: true}, now)
		require.NoError(t, err)
		require.True(t, ev[0].(*event.StepFailed).Final)
	})

	t.Run("StaleAttemptIsDropped", func(t *testing.T) {
		t.Parallel()
		h := setup(t, event.RetryPolicy{}).add(&event.StepCompleted{StepID: "charge", Attempt: 1, Output: json.RawMessage(`1`)})
		_, err := core.StepResult(h.snapshot(), "charge", 1, core.StepOutcome{Output: json.RawMessage(`2`)}, now)
		require.ErrorIs(t, err, core.ErrStale)
		_, err = core.StepResult(h.snapshot(), "nope", 1, core.StepOutcome{}, now)
		require.ErrorIs(t, err, core.ErrNotFound)
	})
}

func TestDeliveries(t *testing.T) {
	t.Parallel()
	h := newHistory(t, "r", event.Spec{}).add(&event.HookCreated{HookID: "approval", Token: "tok"},
		&event.SignalReceived{Name: "poke", Payload: json.RawMessage(`1`), DeliveryID: "d1"})
	s := h.snapshot()

	_, err := core.ReceiveSignal(s, "poke", json.RawMessage(` 1 `), "d1")
	require.ErrorIs(t, err, core.ErrDuplicate, "the same delivery again, whitespace aside")
	_, err = core.ReceiveSignal(s, "poke", json.RawMessage(`2`), "d1")
	require.ErrorIs(t, err, core.ErrDeliveryConflict, "a delivery ID reused with another payload")
	_, err = core.ReceiveSignal(s, "prod", json.RawMessage(`1`), "d1")
	require.ErrorIs(t, err, core.ErrDeliveryConflict, "a delivery ID reused with another signal name")
	_, err = core.ReceiveSignal(s, "poke", json.RawMessage(`{`), "d2")
	require.ErrorIs(t, err, core.ErrInvalidInput)
	_, err = core.ReceiveSignal(s, "po.ke", json.RawMessage(`1`), "d2")
	require.ErrorIs(t, err, core.ErrInvalidInput)
	_, err = core.ReceiveSignal(s, "poke", json.RawMessage(`1`), "")
	require.ErrorIs(t, err, core.ErrInvalidInput)

	_, err = core.ReceiveHook(s, "missing", json.RawMessage(`1`), "h1")
	require.ErrorIs(t, err, core.ErrNotFound)
	ev, err := core.ReceiveHook(s, "approval", json.RawMessage(`{"ok":true}`), "h1")
	require.NoError(t, err)
	s = h.add(ev...).snapshot()
	_, err = core.ReceiveHook(s, "approval", json.RawMessage(`{"ok":true}`), "h1")
	require.ErrorIs(t, err, core.ErrDuplicate)
	_, err = core.ReceiveHook(s, "approval", json.RawMessage(`{"ok":"yes"}`), "h1")
	require.ErrorIs(t, err, core.ErrDeliveryConflict)
	_, err = core.ReceiveHook(s, "approval", json.RawMessage(`{"ok":false}`), "h2")
	require.ErrorIs(t, err, core.ErrAlreadyReceived)

	ev, err = core.RequestCancel(s, "customer asked")
	require.NoError(t, err)
	s = h.add(ev...).snapshot()
	require.Equal(t, core.StatusCancelling, s.Status)
	_, err = core.RequestCancel(s, "again")
	require.ErrorIs(t, err, core.ErrDuplicate)

	ev, err = core.Terminate(s, "")
	require.NoError(t, err)
	s = h.add(ev...).snapshot()
	require.Equal(t, core.StatusFailed, s.Status)
	require.Equal(t, event.CauseOperator, s.Outcome.Cause)
	_, err = core.ReceiveSignal(s, "poke", json.RawMessage(`1`), "d9")
	require.ErrorIs(t, err, core.ErrTerminal)
}
