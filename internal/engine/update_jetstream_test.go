package engine_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// TestWithStartOnJetStream: on a real JetStream, three engines (as three ingress replicas) start
// the same run at once, one with a plain Start, one with UpdateWithStart, one with
// SignalWithStart, each twice: exactly one run.started, the update and the signal recorded
// once each; a driving engine then accepts and completes the update.
func TestWithStartOnJetStream(t *testing.T) {
	ctx := t.Context()
	srv := natstest.RunJetStream(t)
	js := natstest.JetStream(t, srv)
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}))
	newEngine := func(rt engine.Runtime) (*engine.Engine, *jsstore.Store) {
		js := natstest.JetStream(t, srv)
		st, err := jsstore.New(ctx, js, nil)
		require.NoError(t, err)
		h := newJSHost(t, js)
		e, err := engine.New(engine.Config{Store: st, Host: h, Runtime: rt, Logger: natstest.Logger(), CacheSize: -1})
		require.NoError(t, err)
		return e, st
	}
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "counter", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		return ctx.AwaitSignal("stop", "stop"), nil
	})
	flow.RegisterUpdate(reg, "counter", "add", flow.UpdateHandler[int]{
		Complete: func(_ *flow.Context, _ *flow.Update, n int) (any, error) { return n + 1, nil },
	})
	engines := make([]*engine.Engine, 3)
	var st *jsstore.Store
	for i := range engines {
		engines[i], st = newEngine(nil)
	}
	driver, _ := newEngine(sdk.RuntimeOf(reg))
	spec := event.Spec{Definition: "counter"}
	for i := range 5 {
		runID := fmt.Sprintf("counter-%d", i)
		p := engine.StartParams{RunID: runID, Spec: spec, Input: []byte(`{"from":0}`)}
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		release := make(chan struct{})
		for range 2 {
			wg.Go(func() {
				<-release
				_, _, err := engines[0].Start(ctx, p)
				errs <- err
			})
			wg.Go(func() {
				<-release
				_, _, err := engines[1].UpdateWithStart(ctx, p, "u-1", "add", []byte(`41`))
				errs <- err
			})
			wg.Go(func() {
				<-release
				_, _, err := engines[2].SignalWithStart(ctx, p, "poke", []byte(`true`), "d-1")
				errs <- err
			})
		}
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, runID)
		}
		hist, err := st.Load(ctx, runID, 0)
		require.NoError(t, err)
		require.Empty(t, core.Check(runID, hist))
		counts := map[event.Type]int{}
		for _, e := range hist {
			counts[e.Type()]++
		}
		require.Equal(t, map[event.Type]int{event.TypeRunStarted: 1, event.TypeUpdateReceived: 1, event.TypeSignalReceived: 1}, counts, runID)

		// Another start of the same ID with another input is refused, and appends nothing.
		_, _, err = engines[1].UpdateWithStart(ctx, engine.StartParams{RunID: runID, Spec: spec, Input: []byte(`{"from":1}`)}, "u-2", "add", []byte(`1`))
		require.ErrorIs(t, err, engine.ErrRunExists)

		res, err := driver.Drive(ctx, runID, 0)
		require.NoError(t, err)
		require.Equal(t, core.StatusSuspended, res.Status)
		s, err := driver.Snapshot(ctx, runID)
		require.NoError(t, err)
		u := s.Updates["u-1"]
		require.Equal(t, core.UpdateCompleted, u.Status)
		require.JSONEq(t, `42`, string(u.Result))
		require.Len(t, s.Updates, 1)
	}
	// An update to an ended run is refused; its recorded updates still deduplicate.
	_, err := engines[0].Terminate(ctx, "counter-0", "done")
	require.NoError(t, err)
	_, err = engines[0].Update(ctx, "counter-0", "u-9", "add", json.RawMessage(`1`))
	require.ErrorIs(t, err, core.ErrTerminal)
	_, err = engines[0].Update(ctx, "counter-0", "u-1", "add", json.RawMessage(`41`))
	require.NoError(t, err)

}
