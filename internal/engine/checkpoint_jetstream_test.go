package engine_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/flow"
)

// TestColdLoadFromCheckpointReadsOnlyTheTail: on a real server, an engine appends a run's
// signals, and the run's snapshot at seq 400 is checkpointed at its commit's stream position,
// as the history service writes checkpoints (engine.NewCheckpoint); the engine itself writes
// none. A cold load in a fresh process (a new store that knows nothing of the run) then reads
// the checkpoint, one message to check it, and the tail after it: a few messages instead of the
// run's 452, and a snapshot equal to the projection of the whole history. A checkpoint that does
// not match the history is not used: the load reads everything, and is still right.
func TestColdLoadFromCheckpointReadsOnlyTheTail(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	js := natstest.NewJetStream(t)
	cps, err := objstore.OpenCheckpoints(ctx, js, streams.CheckpointsBucket)
	require.NoError(t, err)
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "ticks", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.Signal("stop") != nil {
			return ctx.Complete(ctx.Snapshot().Progress.SignalsReceived), nil
		}
		return ctx.AwaitSignal("stop", "stop"), nil
	})
	newEngine := func(checkpoints engine.CheckpointReader) (*engine.Engine, *jsstore.Store) {
		st, err := jsstore.New(ctx, js, &jsstore.Options{Source: "flow/test"})
		require.NoError(t, err)
		host := newJSHost(t, js)
		e, err := engine.New(engine.Config{Store: st, Runtime: sdk.RuntimeOf(reg), Host: host, Replayer: sdk.RuntimeOf(reg).Replaying(), Logger: natstest.Logger(),
			Checkpoints: checkpoints})
		require.NoError(t, err)
		return e, st
	}

	e1, st1 := newEngine(cps)
	spec, err := sdk.RuntimeOf(reg).Spec("ticks", []byte("null"))
	require.NoError(t, err)
	runID, _, err := e1.Start(ctx, engine.StartParams{RunID: "ticks-1", Spec: spec})
	require.NoError(t, err)
	_, err = e1.Drive(ctx, runID, 0)
	require.NoError(t, err)
	for i := range 450 {
		_, err := e1.Signal(ctx, runID, "tick", []byte(`{}`), fmt.Sprintf("d%d", i))
		require.NoError(t, err)
		if i != 397 { // run.started, signal.awaited, then 398 signals: seq 400
			continue
		}
		s, err := e1.ReadSnapshot(ctx, runID)
		require.NoError(t, err)
		seq, pos, ok := st1.Position(runID)
		require.True(t, ok)
		require.Equal(t, uint64(400), seq)
		require.Equal(t, seq, s.Seq)
		cp, err := engine.NewCheckpoint(s, pos)
		require.NoError(t, err)
		require.NoError(t, cps.Save(ctx, cp))
	}
	cp, err := cps.Latest(ctx, runID)
	require.NoError(t, err)
	require.NotNil(t, cp)
	require.Equal(t, uint64(400), cp.Seq, "the engine writes no checkpoint of its own")

	_, full := newEngine(nil)
	hist, err := full.Load(ctx, runID, 0)
	require.NoError(t, err)
	require.Len(t, hist, 452)
	whole, err := core.Project(runID, hist)
	require.NoError(t, err)

	// A fresh process: the checkpoint, the message it ends with, the 52 events after it.
	e2, st2 := newEngine(cps)
	s, err := e2.ReadSnapshot(ctx, runID)
	require.NoError(t, err)
	require.True(t, reflect.DeepEqual(whole, s), "the snapshot from the checkpoint and the tail differs from the projection")
	read := st2.MessagesRead()
	require.LessOrEqual(t, read, uint64(1+52), "a cold load with a checkpoint read %d messages", read)
	require.GreaterOrEqual(t, read, uint64(2))

	// The driver's cold load too, verifying the tail's decisions: the run goes on and ends.
	e3, st3 := newEngine(cps)
	_, err = e3.Signal(ctx, runID, "stop", []byte(`{}`), "stop")
	require.NoError(t, err)
	res, err := e3.Drive(ctx, runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.Less(t, st3.MessagesRead(), uint64(2*(1+53)), "signal and drive read only the tail each")

	// A checkpoint that does not match the history (another event at its position) is not used.
	cp.Seq = 10
	require.NoError(t, cps.Save(ctx, *cp))
	e4, st4 := newEngine(cps)
	s, err = e4.ReadSnapshot(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, s.Status)
	require.GreaterOrEqual(t, st4.MessagesRead(), uint64(454), "a checkpoint that does not match is not used")
	final, err := full.Load(context.WithoutCancel(ctx), runID, 0)
	require.NoError(t, err)
	want, err := core.Project(runID, final)
	require.NoError(t, err)
	require.True(t, reflect.DeepEqual(want, s))
}
