package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// A task whose run a worker cannot read yet is read again later, not dropped: on a busy
// cluster the stream's leader can be behind the follower the history service read the commit
// from, and the history service's own task for that commit has the same message ID, so a
// dropped task would leave the run undriven forever (seen in the compose chaos test).
func TestTaskForARunNotReadableYet(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "one", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			return ctx.Complete("done"), nil
		})
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	js := natstest.JetStream(t, b.srv)
	host, err := jshost.New(ctx, js, "flow/test", quiet)
	require.NoError(t, err)
	const runID = "late"
	require.NoError(t, host.Resume(ctx, engine.Task{RunID: runID, Seq: 1}))

	// Wait until a worker has found no run at the task's first delivery and taken it again.
	cons, err := js.Consumer(ctx, streams.Tasks, "worker-"+streams.DefaultQueue)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Consumer >= 2
	}, 30*time.Second, 5*time.Millisecond, "the task is delivered again after finding no run")

	// The commit becomes readable only now.
	st, err := jsstore.New(ctx, js, &jsstore.Options{Source: "flow/test"})
	require.NoError(t, err)
	_, err = st.Append(ctx, runID, 0, event.Event{Time: time.Now().UTC(), Payload: &event.RunStarted{
		Spec: event.Spec{Definition: "one"}, Input: json.RawMessage("null"), Seed: "seed"}})
	require.NoError(t, err)
	var out string
	require.NoError(t, b.client.Result(ctx, runID, &out), "the run was driven after all")
	require.Equal(t, "done", out)
}
