package natsperm_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/pkg/flow"
)

// Hook token routes under the roles: the history service alone writes FLOW_HOOKS (and
// FLOW_PARKED). A webhook run waiting on its hook is reset through the ingress, which may only
// read the routes; the delivery to the old token reaches the new run, whose copied hook the
// history service routes to it. No service is refused a subject meanwhile.
func TestHookRoutesAsTheirRoles(t *testing.T) {
	st := runRoles(t)
	c := st.client
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	run, err := c.Start(ctx, "webhook", nil, nil)
	require.NoError(t, err)
	var token string
	require.Eventually(t, func() bool {
		s, err := c.Snapshot(ctx, run)
		if err != nil || s.Hooks[examples.WebhookHook] == nil || s.Steps["announce-hook"] == nil || s.Steps["announce-hook"].Output == nil {
			return false
		}
		token = hookToken(t, ctx, st.uiNC, run, examples.WebhookHook)
		return token != "" && s.Hooks[examples.WebhookHook].Token == "redacted:"+examples.WebhookHook
	}, 30*time.Second, 10*time.Millisecond, "the webhook creates its hook and announces it")
	// Seq 4, the announcement's step.completed: the new run copies the pending hook.
	reset, err := c.Reset(ctx, run, &flow.ResetOptions{Seq: 4, Reason: "roles"})
	require.NoError(t, err)
	to, err := c.DeliverHook(ctx, token, map[string]string{"paid": "after the reset"}, nil)
	require.NoError(t, err)
	require.Equal(t, reset.NewRunID, to)
	var out examples.WebhookResult
	require.NoError(t, c.Result(ctx, reset.NewRunID, &out))
	require.JSONEq(t, `{"paid":"after the reset"}`, string(out.Received))
	require.Empty(t, st.v.Seen(), "a service or a client was refused a subject its role needs")
}
