package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// TestOffloadFaultBetweenObjectAndEvent: on a real server, a step's large output is stored in
// FLOW_PAYLOADS and the append of its step.completed fails (fault.AfterPayloadBeforeAppend):
// the object is left with no event referring to it, the attempt fails and is retried, the retry
// stores the same bytes under the same name, and the run completes with them, read back by the
// workflow. The orphan is the object the history then refers to: nothing is lost or doubled.
func TestOffloadFaultBetweenObjectAndEvent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	js := natstest.NewJetStream(t)
	store, err := objstore.Open(ctx, js, streams.PayloadsBucket, 1024)
	require.NoError(t, err)
	st, err := jsstore.New(ctx, js, &jsstore.Options{Source: "flow/test"})
	require.NoError(t, err)
	h := newHost()
	big := strings.Repeat("z", 600<<10)
	runs := 0
	reg := flow.NewRegistry(nil)
	sdk.RuntimeOf(reg).UsePayloads(store)
	flow.RegisterWorkflow(reg, "big", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		out, ok, err := flow.Output[string](ctx, "make")
		if err != nil || !ok {
			return ctx.ScheduleStep("make", "make", nil), err
		}
		return ctx.Complete(len(out)), nil
	})
	flow.RegisterStep(reg, "make", func(context.Context, any) (string, error) {
		runs++
		return big, nil
	})
	faults := &fault.Injector{}
	faults.Arm(fault.AfterPayloadBeforeAppend, fault.Fail, 0, 1)
	e, err := engine.New(engine.Config{Store: st, Runtime: sdk.RuntimeOf(reg), Host: h, Logger: natstest.Logger(), Payloads: store, Faults: faults})
	require.NoError(t, err)
	spec, err := sdk.RuntimeOf(reg).Spec("big", []byte("null"))
	require.NoError(t, err)
	runID, _, err := e.Start(ctx, engine.StartParams{RunID: "big-1", Spec: spec})
	require.NoError(t, err)

	ref := payload.RefOf([]byte(`"` + big + `"`))
	res, err := e.Drive(ctx, runID, 0)
	require.NoError(t, err)
	for res.Status == core.StatusSuspended { // the retry's backoff: fire it as the scheduler would
		hist, err := st.Load(ctx, runID, 0)
		require.NoError(t, err)
		last := hist[len(hist)-1]
		rs, ok := last.Payload.(*event.StepRetryScheduled)
		require.True(t, ok, "suspended after %s", last.Type())
		require.NoError(t, e.Fire(ctx, core.Timer{RunID: runID, Kind: core.TimerRetry, ID: rs.StepID, Attempt: rs.Attempt, Due: rs.Due, Seq: last.Seq}))
		res, err = e.Drive(ctx, runID, 0)
		require.NoError(t, err)
	}
	require.Equal(t, core.StatusCompleted, res.Status)
	require.Equal(t, 2, faults.Hits(fault.AfterPayloadBeforeAppend), "reached by the first attempt (failed there) and the retry")
	require.Equal(t, 2, runs, "the attempt ran again after the fault")

	hist, err := st.Load(ctx, runID, 0)
	require.NoError(t, err)
	require.Empty(t, core.Check(runID, hist))
	var failed, completed int
	for _, ev := range hist {
		switch p := ev.Payload.(type) {
		case *event.StepFailed:
			failed++
			require.Equal(t, "payload", p.Error.Kind)
		case *event.StepCompleted:
			completed++
			require.Equal(t, string(ref.JSON()), string(p.Output))
		case *event.RunCompleted:
			require.JSONEq(t, `614400`, string(p.Output))
		}
	}
	require.Equal(t, 1, failed)
	require.Equal(t, 1, completed)
	has, err := store.Has(ctx, ref)
	require.NoError(t, err)
	require.True(t, has)
}
