package flowtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

type account struct {
	Balance int `json:"balance"`
}

// registerAccount registers workflow "account": it runs step "warmup" first, then, for each
// open deposit, step "post-<update ID>" and completes the deposit with the step's output; it
// completes on signal "close". Update "deposit" is validated by deposit (nil: positiveDeposit);
// update "peek" completes at once with peek of the number of updates so far (nil: that
// number).
func registerAccount(reg *flow.Registry, deposit func(amount int) error, peek func(updates int) any) {
	if deposit == nil {
		deposit = positiveDeposit
	}
	if peek == nil {
		peek = func(n int) any { return n }
	}
	flow.RegisterWorkflow(reg, "account", func(ctx *flow.Context, in account) (flow.Decision, error) {
		if ctx.StepOutput("warmup") == nil {
			return ctx.ScheduleStep("warmup", "warmup", nil, flow.WithRetry(flow.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Minute})), nil
		}
		balance := in.Balance
		for _, u := range ctx.Updates() {
			if u.Status != flow.UpdateAccepted && u.Status != flow.UpdateCompleted || u.Name != "deposit" {
				continue
			}
			out := ctx.StepOutput("post-" + u.ID)
			if out == nil {
				var amount int
				if err := flow.DecodeUpdate(u, &amount); err != nil {
					return nil, err
				}
				return ctx.ScheduleStep("post-"+u.ID, "post", balance+amount), nil
			}
			if err := json.Unmarshal(out, &balance); err != nil {
				return nil, err
			}
			if u.Open() {
				return ctx.CompleteUpdate(u.ID, account{Balance: balance}), nil
			}
		}
		if ctx.Signal("close") != nil {
			return ctx.Complete(account{Balance: balance}), nil
		}
		return ctx.AwaitSignal("close", "close"), nil
	})
	flow.RegisterStep(reg, "warmup", func(context.Context, any) (string, error) { return "warm", nil })
	flow.RegisterStep(reg, "post", func(_ context.Context, balance int) (int, error) { return balance, nil })
	flow.RegisterUpdate(reg, "account", "deposit", flow.UpdateHandler[int]{
		Validate: func(_ *flow.Context, _ *flow.Update, amount int) error { return deposit(amount) },
	})
	flow.RegisterUpdate(reg, "account", "peek", flow.UpdateHandler[any]{
		Complete: func(ctx *flow.Context, _ *flow.Update, _ any) (any, error) { return peek(len(ctx.Updates())), nil },
	})
}

// positiveDeposit is the validator of deposits: it rejects amounts that are not positive.
func positiveDeposit(amount int) error {
	if amount <= 0 {
		return flow.NewError("invalid_amount", "a deposit must be positive")
	}
	return nil
}

func accountEnv(t *testing.T) (*testBundle, string) {
	t.Helper()
	b := setup(t, func(reg *flow.Registry) { registerAccount(reg, nil, nil) })
	runID, err := b.env.Start(b.ctx, "account", account{Balance: 100}, &flowtest.StartOptions{RunID: "acct-1"})
	require.NoError(t, err)
	return b, runID
}

func TestUpdateCases(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, b *testBundle, runID string)
	}{{
		name: "rejected: the caller gets the validator's error and the history records it",
		run: func(t *testing.T, b *testBundle, runID string) {
			_, err := b.env.Update(b.ctx, runID, "deposit", -5, "u1")
			require.ErrorIs(t, err, flow.ErrUpdateRejected)
			var ue *flow.UpdateError
			require.ErrorAs(t, err, &ue)
			require.Equal(t, "invalid_amount", ue.Kind)
			require.Contains(t, b.types(t, runID), event.TypeUpdateRejected)
			require.Equal(t, flow.StatusSuspended, b.snapshot(t, runID).Status)
		},
	}, {
		name: "completed after a step",
		run: func(t *testing.T, b *testBundle, runID string) {
			out, err := b.env.Update(b.ctx, runID, "deposit", 10, "u1")
			require.NoError(t, err)
			require.Equal(t, flow.UpdateCompleted, out.Status)
			var got account
			require.NoError(t, out.Decode(&got))
			require.Equal(t, 110, got.Balance)
			types := b.types(t, runID)
			require.Equal(t, []event.Type{event.TypeStepCompleted, event.TypeUpdateCompleted}, types[len(types)-2:]) // the signal wait is re-issued, unchanged
		},
	}, {
		name: "completed at once by its handler",
		run: func(t *testing.T, b *testBundle, runID string) {
			out, err := b.env.Update(b.ctx, runID, "peek", nil, "p1")
			require.NoError(t, err)
			require.JSONEq(t, `1`, string(out.Result))
		},
	}, {
		name: "the same update ID twice is applied once and has one outcome",
		run: func(t *testing.T, b *testBundle, runID string) {
			first, err := b.env.Update(b.ctx, runID, "deposit", 10, "u1")
			require.NoError(t, err)
			again, err := b.env.Update(b.ctx, runID, "deposit", 10, "u1")
			require.NoError(t, err)
			require.Equal(t, first, again)
			n := 0
			for _, typ := range b.types(t, runID) {
				if typ == event.TypeUpdateReceived {
					n++
				}
			}
			require.Equal(t, 1, n)
			_, err = b.env.Update(b.ctx, runID, "deposit", 11, "u1")
			require.ErrorIs(t, err, flow.ErrDeliveryConflict)
			// A rejected one is rejected again, without a second record.
			_, err = b.env.Update(b.ctx, runID, "deposit", 0, "u2")
			require.ErrorIs(t, err, flow.ErrUpdateRejected)
			_, err = b.env.Update(b.ctx, runID, "deposit", 0, "u2")
			require.ErrorIs(t, err, flow.ErrUpdateRejected)
		},
	}, {
		name: "an update to an ended run is refused",
		run: func(t *testing.T, b *testBundle, runID string) {
			_, err := b.env.Update(b.ctx, runID, "deposit", 10, "u1")
			require.NoError(t, err)
			require.NoError(t, b.env.Signal(b.ctx, runID, "close", nil))
			require.Equal(t, flow.StatusCompleted, b.snapshot(t, runID).Status)
			_, err = b.env.Update(b.ctx, runID, "deposit", 10, "u2")
			require.ErrorIs(t, err, flow.ErrTerminal)
			// The update it took before it ended still answers.
			out, err := b.env.Update(b.ctx, runID, "deposit", 10, "u1")
			require.NoError(t, err)
			require.Equal(t, flow.UpdateCompleted, out.Status)
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, runID := accountEnv(t)
			tc.run(t, b, runID)
		})
	}
}

// TestUpdateWhileStepRetrying: an update that arrives while the run waits on a step is accepted
// at the next decision, the step is left alone, and the update completes after it.
func TestUpdateWhileStepRetrying(t *testing.T) {
	b := setup(t, func(reg *flow.Registry) { registerAccount(reg, nil, nil) })
	calls := 0
	b.env.OnStep("warmup", func(context.Context, json.RawMessage) (any, error) {
		if calls++; calls == 1 {
			return nil, errors.New("cold")
		}
		return "warm", nil
	})
	runID, err := b.env.Start(b.ctx, "account", account{Balance: 100}, &flowtest.StartOptions{RunID: "acct-1"})
	require.NoError(t, err)
	require.Equal(t, flow.StatusSuspended, b.snapshot(t, runID).Status)

	out, err := b.env.Update(b.ctx, runID, "deposit", 5, "u1")
	require.NoError(t, err)
	require.Equal(t, flow.UpdateAccepted, out.Status)
	s := b.snapshot(t, runID)
	require.EqualValues(t, "retrying", s.Steps["warmup"].Status)
	require.NotContains(t, b.types(t, runID), event.TypeStepCancelled)

	require.NoError(t, b.env.Advance(b.ctx, time.Minute))
	out, err = b.env.UpdateResult(b.ctx, runID, "u1")
	require.NoError(t, err)
	require.Equal(t, flow.UpdateCompleted, out.Status)
	require.JSONEq(t, `{"balance":105}`, string(out.Result))
}

// TestUpdateAbortedByRunEnd: an accepted update of a run that ends before completing it answers
// with ErrUpdateAborted.
func TestUpdateAbortedByRunEnd(t *testing.T) {
	b := setup(t, func(reg *flow.Registry) { registerAccount(reg, nil, nil) })
	b.env.OnStep("warmup", func(context.Context, json.RawMessage) (any, error) { return nil, errors.New("cold") })
	runID, err := b.env.Start(b.ctx, "account", account{}, &flowtest.StartOptions{RunID: "acct-1"})
	require.NoError(t, err)
	out, err := b.env.Update(b.ctx, runID, "deposit", 5, "u1")
	require.NoError(t, err)
	require.Equal(t, flow.UpdateAccepted, out.Status)
	require.NoError(t, b.env.Terminate(b.ctx, runID, "closing the books"))
	_, err = b.env.UpdateResult(b.ctx, runID, "u1")
	require.ErrorIs(t, err, flow.ErrUpdateAborted)
	require.ErrorContains(t, err, "before completing the accepted update")
}

func TestUpdateWithStart(t *testing.T) {
	b := setup(t, func(reg *flow.Registry) { registerAccount(reg, nil, nil) })
	opts := &flowtest.StartOptions{RunID: "acct-1"}
	out, err := b.env.UpdateWithStart(b.ctx, "account", account{Balance: 1}, opts, "deposit", 2, "u1")
	require.NoError(t, err)
	require.JSONEq(t, `{"balance":3}`, string(out.Result))
	hist, err := b.env.History(b.ctx, "acct-1")
	require.NoError(t, err)
	// One commit: the run never exists without its update.
	require.Equal(t, event.TypeRunStarted, hist[0].Type())
	require.Equal(t, event.TypeUpdateReceived, hist[1].Type())
	require.Equal(t, hist[0].Time, hist[1].Time)

	// The run exists: the update is sent to it.
	out, err = b.env.UpdateWithStart(b.ctx, "account", account{Balance: 1}, opts, "deposit", 4, "u2")
	require.NoError(t, err)
	require.JSONEq(t, `{"balance":7}`, string(out.Result))
	// The same update again: the same outcome, nothing appended.
	again, err := b.env.UpdateWithStart(b.ctx, "account", account{Balance: 1}, opts, "deposit", 4, "u2")
	require.NoError(t, err)
	require.Equal(t, out, again)
	// Another start for the same ID is refused, as Start refuses it.
	_, err = b.env.UpdateWithStart(b.ctx, "account", account{Balance: 9}, opts, "deposit", 4, "u3")
	require.ErrorIs(t, err, flow.ErrRunExists)
}

// TestUpdateHandlerPanics: a handler that panics blocks the run (decision.failed) and the
// caller learns it, instead of waiting for an outcome that needs fixed code.
func TestUpdateHandlerPanics(t *testing.T) {
	b := setup(t, func(reg *flow.Registry) {
		registerAccount(reg, nil, nil)
		flow.RegisterUpdate(reg, "account", "boom", flow.UpdateHandler[any]{
			Validate: func(*flow.Context, *flow.Update, any) error { panic("handler bug") },
		})
	})
	runID, err := b.env.Start(b.ctx, "account", account{}, &flowtest.StartOptions{RunID: "acct-1"})
	require.NoError(t, err)
	_, err = b.env.Update(b.ctx, runID, "boom", nil, "b1")
	var runErr *flow.RunError
	require.ErrorAs(t, err, &runErr)
	require.Equal(t, flow.StatusBlocked, runErr.Status)
	require.Contains(t, runErr.Message, "handler bug")
	require.Contains(t, b.types(t, runID), event.TypeDecisionFailed)
}
