package engine_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
)

// Starts with one dedup key, from several engines (ingress replicas) on a real nats-server,
// share FLOW_START_KEYS: racing starts make one run, and a crash between the key and the start
// (at fault.AfterKeyBeforeStart) neither loses the start nor makes two runs.
func TestDedupOnJetStreamIsSharedAndSurvivesACrash(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	js := natstest.NewJetStream(t)
	st, err := jsstore.New(ctx, js, &jsstore.Options{Source: "flow/test"})
	require.NoError(t, err)
	newEngine := func(f *fault.Injector) *engine.Engine {
		host := newJSHost(t, js)
		keys, err := jshost.NewStartKeys(ctx, js)
		require.NoError(t, err)
		e, err := engine.New(engine.Config{Store: st, Host: host, Logger: natstest.Logger(), CacheSize: -1, Keys: keys, Faults: f})
		require.NoError(t, err)
		return e
	}
	start := func(e *engine.Engine, runID, key string, in int) (string, bool, error) {
		return e.Start(ctx, engine.StartParams{RunID: runID, Spec: event.Spec{Definition: "charge"},
			Input: json.RawMessage(fmt.Sprint(in)), DedupKey: key, DedupWindow: time.Hour})
	}
	runs := func() int {
		info, err := js.Stream(ctx, streams.History)
		require.NoError(t, err)
		i, err := info.Info(ctx)
		require.NoError(t, err)
		return int(i.State.NumSubjects)
	}

	// Racing starts of one key on four engines: one run, which every start returns.
	var engines []*engine.Engine
	for range 4 {
		engines = append(engines, newEngine(nil))
	}
	var wg sync.WaitGroup
	ids := make([]string, 16)
	created := make([]bool, 16)
	for i := range ids {
		wg.Go(func() {
			var err error
			ids[i], created[i], err = start(engines[i%4], fmt.Sprintf("race-%d", i), "invoice-1", i)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	n := 0
	for i := range ids {
		require.Equal(t, ids[0], ids[i])
		if created[i] {
			n++
		}
	}
	require.Equal(t, 1, n, "one start created the run")
	require.Equal(t, 1, runs())

	// A crash after the key is claimed: the retry, or any other start of the key, starts the
	// run the key names, once.
	f := &fault.Injector{}
	f.Arm(fault.AfterKeyBeforeStart, fault.Fail, 0, 1)
	_, _, err = start(newEngine(f), "crashed", "invoice-2", 1)
	require.ErrorIs(t, err, fault.ErrInjected)
	require.Equal(t, 1, runs(), "nothing appended yet")
	for i := range 8 {
		wg.Go(func() {
			id, _, err := start(engines[i%4], fmt.Sprintf("after-%d", i), "invoice-2", 2)
			require.NoError(t, err)
			require.Equal(t, "crashed", id)
		})
	}
	wg.Wait()
	require.Equal(t, 2, runs(), "the key's run, started once")
	hist, err := st.Load(ctx, "crashed", 0)
	require.NoError(t, err)
	require.Len(t, hist, 1)
}

// Debounced starts racing on several engines on a real nats-server become one run that records
// every start: one run.started and a run.debounced for each other start.
func TestDebounceOnJetStreamUnderRacingStarts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	js := natstest.NewJetStream(t)
	st, err := jsstore.New(ctx, js, &jsstore.Options{Source: "flow/test"})
	require.NoError(t, err)
	var engines []*engine.Engine
	for range 3 {
		host := newJSHost(t, js)
		keys, err := jshost.NewStartKeys(ctx, js)
		require.NoError(t, err)
		e, err := engine.New(engine.Config{Store: st, Host: host, Logger: natstest.Logger(), CacheSize: -1, Keys: keys})
		require.NoError(t, err)
		engines = append(engines, e)
	}
	const n = 12
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			ids[i], _, err = engines[i%3].Start(ctx, engine.StartParams{RunID: fmt.Sprintf("save-%d", i), Spec: event.Spec{Definition: "index"},
				Input: json.RawMessage(fmt.Sprint(i)), Debounce: &engine.Debounce{Key: "doc-1", Period: time.Hour}})
			require.NoError(t, err)
		})
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	hist, err := st.Load(ctx, ids[0], 0)
	require.NoError(t, err)
	require.Len(t, hist, n, "one run.started and %d run.debounced", n-1)
	for _, e := range hist[1:] {
		require.Equal(t, event.TypeRunDebounced, e.Type())
	}
}
