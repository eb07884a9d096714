package ingress_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// registerVault registers workflow "vault": update "store" is accepted at once and completed
// with "stored" only once signal "commit" arrives; the run then waits for the next commit.
func registerVault(reg *flow.Registry) {
	flow.RegisterWorkflow(reg, "vault", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		commits := 0
		for ctx.Signal("commit-"+strconv.Itoa(commits)) != nil {
			commits++
		}
		for _, u := range ctx.Updates() {
			if u.Open() && commits > 0 {
				return ctx.CompleteUpdate(u.ID, "stored"), nil
			}
		}
		return ctx.AwaitSignal("commit-"+strconv.Itoa(commits), "commit"), nil
	})
	flow.RegisterUpdate(reg, "vault", "store", flow.UpdateHandler[string]{})
}

// An update that is in flight when its run is reset is answered by the new run the reset carried
// it on to, never "aborted" by the old one; and an update the old run was
// answered "aborted" for before the reset (the run had ended) stays aborted: the reset neither
// carries it on nor applies it.
func TestUpdateFollowsReset(t *testing.T) {
	b := setupLedger(t, nil)
	ctx := t.Context()

	// In flight: accepted, waiting for the signal, when the run is reset.
	_, err := b.client.Start(ctx, "vault", nil, &flow.StartOptions{RunID: "vault-1"})
	require.NoError(t, err)
	out, err := b.client.Update(ctx, "vault-1", "store", "gold", &flow.UpdateOptions{UpdateID: "u-1"})
	require.NoError(t, err)
	waitFor(t, "the update is accepted", func() bool {
		out, err = b.client.UpdateResult(ctx, "vault-1", "u-1")
		return err == nil && out.Status == flow.UpdateAccepted
	})
	r, err := b.client.Reset(ctx, "vault-1", &flow.ResetOptions{Seq: 1, Reason: "new code"})
	require.NoError(t, err)
	now, err := b.client.UpdateResult(ctx, "vault-1", "u-1")
	require.NoError(t, err, "the old run does not answer aborted")
	require.NotEqual(t, flow.UpdateCompleted, now.Status)
	_, err = b.client.Signal(ctx, "vault-1", "commit", nil, nil) // follows the reset
	require.NoError(t, err)
	done, err := b.client.AwaitUpdate(ctx, "vault-1", "u-1")
	require.NoError(t, err)
	require.Equal(t, flow.UpdateCompleted, done.Status)
	require.Equal(t, r.NewRunID, done.RunID, "answered by the run the reset carried it to")
	completed := func(p event.Payload) bool { return p.(*event.UpdateCompleted).UpdateID == "u-1" }
	require.Equal(t, 0, b.count(t, "vault-1", event.TypeUpdateCompleted, completed))
	require.Equal(t, 1, b.count(t, r.NewRunID, event.TypeUpdateCompleted, completed), "applied once")

	// Aborted first: the run is terminated with the update accepted, then reset past it.
	_, err = b.client.Start(ctx, "vault", nil, &flow.StartOptions{RunID: "vault-2"})
	require.NoError(t, err)
	_, err = b.client.Update(ctx, "vault-2", "store", "silver", &flow.UpdateOptions{UpdateID: "u-2"})
	require.NoError(t, err)
	waitFor(t, "the update is accepted", func() bool {
		out, err = b.client.UpdateResult(ctx, "vault-2", "u-2")
		return err == nil && out.Status == flow.UpdateAccepted
	})
	_, err = b.client.Terminate(ctx, "vault-2", "stop")
	require.NoError(t, err)
	_, err = b.client.AwaitUpdate(ctx, "vault-2", "u-2")
	var ue *flow.UpdateError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, flow.UpdateStatus("aborted"), ue.Status)
	r2, err := b.client.Reset(ctx, "vault-2", &flow.ResetOptions{LastDecision: true})
	require.NoError(t, err)
	_, err = b.client.Signal(ctx, r2.NewRunID, "commit", nil, nil)
	require.NoError(t, err)
	_, err = b.client.Signal(ctx, r2.NewRunID, "commit", nil, &flow.DeliveryOptions{DeliveryID: "again"})
	require.NoError(t, err)
	waitFor(t, "the reset run decided on both signals", func() bool {
		s, err := b.client.Snapshot(ctx, r2.NewRunID)
		return err == nil && s.Status == flow.StatusSuspended && len(s.Signals) >= 2
	})
	_, err = b.client.UpdateResult(ctx, r2.NewRunID, "u-2")
	require.ErrorAs(t, err, &ue, "still aborted in the reset run")
	require.Equal(t, flow.UpdateStatus("aborted"), ue.Status)
	completed2 := func(p event.Payload) bool { return p.(*event.UpdateCompleted).UpdateID == "u-2" }
	require.Equal(t, 0, b.count(t, "vault-2", event.TypeUpdateCompleted, completed2))
	require.Equal(t, 0, b.count(t, r2.NewRunID, event.TypeUpdateCompleted, completed2), "an aborted update is never applied")
}
