package flowtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

// invertedDeposit is a redeploy's deposit validator: it rejects what positiveDeposit accepts
// and accepts what it rejects.
func invertedDeposit(amount int) error {
	if amount > 0 {
		return flow.NewError("deposits_closed", "deposits are closed")
	}
	return nil
}

// TestReplayHistoryUsesRecordedVerdicts: flowtest's replay helper replays an update's recorded
// acceptance or rejection without running the validator again, so a history judged by one
// validator replays under another; the at-once completion of a handler is still compared.
func TestReplayHistoryUsesRecordedVerdicts(t *testing.T) {
	b := setup(t, func(reg *flow.Registry) { registerAccount(reg, nil, nil) })
	runID, err := b.env.Start(b.ctx, "account", account{Balance: 100}, &flowtest.StartOptions{RunID: "acct-1"})
	require.NoError(t, err)
	_, err = b.env.Update(b.ctx, runID, "deposit", 10, "u1")
	require.NoError(t, err)
	_, err = b.env.Update(b.ctx, runID, "deposit", -5, "u2")
	require.ErrorIs(t, err, flow.ErrUpdateRejected)
	_, err = b.env.Update(b.ctx, runID, "peek", nil, "p1")
	require.NoError(t, err)
	require.NoError(t, b.env.Signal(b.ctx, runID, "close", nil))
	require.Equal(t, flow.StatusCompleted, b.snapshot(t, runID).Status)
	hist, err := b.env.History(b.ctx, runID)
	require.NoError(t, err)

	cases := []struct {
		name    string
		deposit func(int) error
		peek    func(int) any
		// wantErr, when set, is what replay must return.
		wantErr error
	}{
		{name: "the validator that judged the history", deposit: positiveDeposit},
		{name: "a validator that rejects what history accepted and accepts what it rejected", deposit: invertedDeposit},
		{name: "a validator that rejects every deposit", deposit: func(int) error { return errors.New("closed") }},
		{name: "a validator that panics is never called", deposit: func(int) error { panic("validator called on replay") }},
		{name: "an at-once completion with another result", peek: func(n int) any { return n + 1 }, wantErr: flow.ErrNonDeterminism},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := flow.NewRegistry(&flow.RegistryOptions{BuildID: "v2"})
			registerAccount(reg, tc.deposit, tc.peek)
			err := flowtest.ReplayHistory(hist, reg)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.ErrorContains(t, err, `"p1"`)
				return
			}
			require.NoError(t, err)
		})
	}
}

// TestUpdateRedeployWithChangedValidator: code deployed with a validator that judges otherwise
// continues a run whose updates the old validator judged (one accepted and still open, one
// rejected) without non-determinism; only the update sent after the deploy meets the new
// validator.
func TestUpdateRedeployWithChangedValidator(t *testing.T) {
	b := setup(t, func(reg *flow.Registry) { registerAccount(reg, nil, nil) })
	var warm atomic.Bool
	b.env.OnStep("warmup", func(context.Context, json.RawMessage) (any, error) {
		if !warm.Load() {
			return nil, errors.New("cold")
		}
		return "warm", nil
	})
	runID, err := b.env.Start(b.ctx, "account", account{Balance: 100}, &flowtest.StartOptions{RunID: "acct-1"})
	require.NoError(t, err)
	out, err := b.env.Update(b.ctx, runID, "deposit", 10, "u1")
	require.NoError(t, err)
	require.Equal(t, flow.UpdateAccepted, out.Status, "open while warmup waits out its backoff")
	_, err = b.env.Update(b.ctx, runID, "deposit", -5, "u2")
	require.ErrorIs(t, err, flow.ErrUpdateRejected)

	inverted := flow.NewRegistry(nil)
	registerAccount(inverted, invertedDeposit, nil)
	require.NoError(t, b.env.Deploy(inverted))
	warm.Store(true)
	require.NoError(t, b.env.Advance(b.ctx, time.Minute))
	s := b.snapshot(t, runID)
	require.Nil(t, s.Blocked, "the redeploy replays the verdicts history recorded")
	out, err = b.env.UpdateResult(b.ctx, runID, "u1")
	require.NoError(t, err)
	require.JSONEq(t, `{"balance":110}`, string(out.Result))

	// A new update meets the new validator.
	out, err = b.env.Update(b.ctx, runID, "deposit", -1, "u3")
	require.NoError(t, err)
	require.JSONEq(t, `{"balance":109}`, string(out.Result))
	_, err = b.env.Update(b.ctx, runID, "deposit", 1, "u4")
	require.ErrorIs(t, err, flow.ErrUpdateRejected)
	require.ErrorContains(t, err, "deposits are closed")
	require.NoError(t, b.env.Signal(b.ctx, runID, "close", nil))
	s = b.snapshot(t, runID)
	require.Equal(t, flow.StatusCompleted, s.Status)
	require.NotContains(t, b.types(t, runID), event.TypeDecisionFailed)

	hist, err := b.env.History(b.ctx, runID)
	require.NoError(t, err)
	for name, deposit := range map[string]func(int) error{"old": positiveDeposit, "new": invertedDeposit} {
		reg := flow.NewRegistry(nil)
		registerAccount(reg, deposit, nil)
		require.NoError(t, flowtest.ReplayHistory(hist, reg), "replaying with the %s validator", name)
	}
}
