package history_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/parked"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
)

// hookRoute is a FLOW_HOOKS entry as the history service writes it (jshost.HookRoute).
type hookRoute struct {
	RunID    string `json:"run_id"`
	HookID   string `json:"hook_id"`
	Released bool   `json:"released,omitempty"`
}

// The reconciler brings the hook token routes and the parked runs in line with history,
// counting each repair: a hook an active run waits on gets its lost route back, a route that
// names a run that never created its hook or no run at all is deleted once older than a claim's
// grace, an ended run's route that was not released is released, and an ended run's parked
// entry is deleted. A second pass finds nothing to repair.
func TestReconcilerRepairsHookRoutesAndParked(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h, c := startEnv(t, srv, history.Config{ReconcileInterval: -1}, registry(""))
	h.SetHookClaimGrace(time.Hour) // the background reconciler is off
	ctx := t.Context()
	js := natstest.JetStream(t, srv)
	hooks, err := js.KeyValue(ctx, streams.HooksBucket)
	require.NoError(t, err)
	parkedKV, err := js.KeyValue(ctx, streams.ParkedBucket)
	require.NoError(t, err)
	route := func(token string) (hookRoute, bool) {
		e, err := hooks.Get(ctx, token)
		if err != nil {
			require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
			return hookRoute{}, false
		}
		var r hookRoute
		require.NoError(t, json.Unmarshal(e.Value(), &r))
		return r, true
	}
	put := func(token string, r hookRoute) {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		_, err = hooks.Put(ctx, token, b)
		require.NoError(t, err)
	}

	// w-1 waits on its hook; d-1 received its delivery and completed.
	_, err = c.Start(ctx, "hook", "tok-wait", &flow.StartOptions{RunID: "w-1"})
	require.NoError(t, err)
	_, err = c.Start(ctx, "hook", "tok-done", &flow.StartOptions{RunID: "d-1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, run := range []string{"w-1", "d-1"} {
			if s, err := c.Snapshot(ctx, run); err != nil || s.Hooks["cb"] == nil {
				return false
			}
		}
		_, a := route("tok-wait")
		_, b := route("tok-done")
		return a && b
	}, 30*time.Second, 10*time.Millisecond, "both hooks are created and routed")
	_, err = c.DeliverHook(ctx, "tok-done", "paid", nil)
	require.NoError(t, err)
	var out string
	require.NoError(t, c.Result(ctx, "d-1", &out))
	require.Eventually(t, func() bool { r, ok := route("tok-done"); return ok && r.Released }, 30*time.Second, 10*time.Millisecond,
		"the ended run's token is released")
	require.Eventually(t, func() bool { s, ok := h.IndexedEntry("d-1"); return ok && s.Status == core.StatusCompleted },
		30*time.Second, 10*time.Millisecond)

	// Drift: w-1's route is lost; a claim of w-1 never committed (tok-ghost); d-1's route is
	// not released; a route names a run that does not exist; the ended d-1 is parked.
	require.NoError(t, hooks.Delete(ctx, "tok-wait"))
	put("tok-ghost", hookRoute{RunID: "w-1", HookID: "ghost"})
	put("tok-done", hookRoute{RunID: "d-1", HookID: "cb"})
	put("tok-nobody", hookRoute{RunID: "nobody", HookID: "cb"})
	b, err := json.Marshal(parked.Run{RunID: "d-1", Queue: streams.DefaultQueue, Definition: "hook", Reason: "drift", ParkedAt: time.Now().UTC()})
	require.NoError(t, err)
	_, err = parkedKV.Put(ctx, "d-1", b)
	require.NoError(t, err)

	before := metrics.Repairs(metrics.StateHooks) + metrics.Repairs(metrics.StateParked)
	done, err := h.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, done[metrics.StateHooks], "w-1 routed again, d-1 released; the young claims are left alone")
	require.Equal(t, 1, done[metrics.StateParked], "d-1's parked entry deleted")
	require.Equal(t, before+3, metrics.Repairs(metrics.StateHooks)+metrics.Repairs(metrics.StateParked))
	r, ok := route("tok-wait")
	require.True(t, ok)
	require.Equal(t, hookRoute{RunID: "w-1", HookID: "cb"}, r)
	r, ok = route("tok-done")
	require.True(t, ok)
	require.True(t, r.Released)
	_, ok = route("tok-nobody")
	require.True(t, ok, "a claim younger than the grace may still be committed")
	_, ok = route("tok-ghost")
	require.True(t, ok, "a claim younger than the grace may still be committed")
	_, err = parkedKV.Get(ctx, "d-1")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)

	// Past the grace, the claim w-1 never committed goes, and so does the route to no run.
	h.SetHookClaimGrace(0)
	done, err = h.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, done[metrics.StateHooks])
	_, ok = route("tok-ghost")
	require.False(t, ok)
	_, ok = route("tok-nobody")
	require.False(t, ok)

	// Nothing drifted: a pass repairs nothing, and w-1 still receives its delivery.
	done, err = h.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, done[metrics.StateHooks]+done[metrics.StateParked])
	_, err = c.DeliverHook(ctx, "tok-wait", "late", nil)
	require.NoError(t, err)
	require.NoError(t, c.Result(ctx, "w-1", &out))
	require.Equal(t, "late", out)
}
