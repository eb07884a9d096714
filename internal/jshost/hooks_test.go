package jshost_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
)

// A hook token's entry that is not a route (here a JetStream acknowledgement, which any NATS user
// allowed to publish to a stream can have the server write onto the key by naming it as the reply
// subject) is taken over by a claim of the token, as the history service's reconciler claims the
// tokens of the hooks live runs wait on: a delivery finds the run again.
func TestRegisterHookTakesOverAForeignEntry(t *testing.T) {
	ctx := t.Context()
	js, h := hostSetup(t)
	hooks, err := js.KeyValue(ctx, streams.HooksBucket)
	require.NoError(t, err)
	_, err = hooks.Put(ctx, "tok1", []byte(`{"stream":"FLOW_HISTORY","seq":1}`))
	require.NoError(t, err)
	require.NoError(t, h.RegisterHook(ctx, "tok1", "r1", "paid"))
	run, hook, err := h.LookupHook(ctx, "tok1")
	require.NoError(t, err)
	require.Equal(t, []string{"r1", "paid"}, []string{run, hook})
	// A route of a live run's hook is not taken over.
	require.ErrorContains(t, h.RegisterHook(ctx, "tok1", "r2", "paid"), "r1")
}
