package ingress_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/worker"
)

// TestUpdateVerdictsSurviveChangedValidator: a worker restarted with a deposit validator that
// judges the other way (it rejects what the old one accepted and accepts what it rejected)
// continues a run whose updates the old validator judged, without non-determinism: replay
// takes the recorded verdicts, and only the updates sent after the restart meet the new
// validator.
func TestUpdateVerdictsSurviveChangedValidator(t *testing.T) {
	b, old := setupLedgerWorker(t, nil)
	ctx := t.Context()
	runID, err := b.client.Start(ctx, "ledger", 100, &flow.StartOptions{RunID: "ledger-redeploy"})
	require.NoError(t, err)
	out, err := b.client.Update(ctx, runID, "deposit", 10, &flow.UpdateOptions{UpdateID: "d1", Wait: true})
	require.NoError(t, err)
	require.JSONEq(t, `110`, string(out.Result))
	_, err = b.client.Update(ctx, runID, "deposit", -1, &flow.UpdateOptions{UpdateID: "d2", Wait: true})
	require.ErrorIs(t, err, flow.ErrUpdateRejected)
	require.NoError(t, old.Stop(ctx))

	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	registerLedgerWith(reg, func(amount int) error {
		if amount > 0 {
			return flow.NewError("deposits_closed", "deposits are closed")
		}
		return nil
	})
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, b.srv), Logger: quiet}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	// The new worker loads the run without a cache and replays it before judging d3.
	out, err = b.client.Update(ctx, runID, "deposit", -5, &flow.UpdateOptions{UpdateID: "d3", Wait: true})
	require.NoError(t, err, "the restarted worker continues the run")
	require.JSONEq(t, `105`, string(out.Result))
	_, err = b.client.Update(ctx, runID, "deposit", 5, &flow.UpdateOptions{UpdateID: "d4", Wait: true})
	require.ErrorIs(t, err, flow.ErrUpdateRejected)
	require.ErrorContains(t, err, "deposits are closed")
	_, err = b.client.Signal(ctx, runID, "close", nil, nil)
	require.NoError(t, err)
	var balance int
	require.NoError(t, b.client.Result(ctx, runID, &balance))
	require.Equal(t, 105, balance)
	require.Zero(t, b.count(t, runID, event.TypeDecisionFailed, nil))
	// The old answers stand.
	st, err := b.client.UpdateResult(ctx, runID, "d1")
	require.NoError(t, err)
	require.Equal(t, flow.UpdateCompleted, st.Status)
	_, err = b.client.UpdateResult(ctx, runID, "d2")
	require.ErrorIs(t, err, flow.ErrUpdateRejected)
}
