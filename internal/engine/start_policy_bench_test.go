package engine_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
)

// BenchmarkStartPolicies measures what a start's policy costs on a real nats-server: a plain
// start (one append), a start with a dedup key (a KV create, then the append), a start that
// dedup returns (a KV create refused, a get, one existence read), a delayed start (the append
// and its timer entry), and the latest-run search over an ID reused 64 times.
func BenchmarkStartPolicies(b *testing.B) {
	ctx := b.Context()
	js := natstest.JetStream(b, natstest.RunJetStream(b))
	require.NoError(b, streams.Ensure(ctx, js, streams.Config{}))
	st, err := jsstore.New(ctx, js, &jsstore.Options{Source: "flow/bench"})
	require.NoError(b, err)
	host, err := jshost.New(ctx, js, "flow/bench", natstest.Logger())
	require.NoError(b, err)
	host.AsyncTasks = true
	keys, err := jshost.NewStartKeys(ctx, js)
	require.NoError(b, err)
	e, err := engine.New(engine.Config{Store: st, Host: host, Logger: natstest.Logger(), CacheSize: -1, Keys: keys})
	require.NoError(b, err)
	spec := event.Spec{Definition: "bench"}
	in := json.RawMessage(`1`)
	run := func(name string, p func(i int) engine.StartParams) {
		b.Run(name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, _, err := e.Start(ctx, p(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("plain", func(i int) engine.StartParams {
		return engine.StartParams{RunID: fmt.Sprintf("plain-%d", i), Spec: spec, Input: in}
	})
	run("dedup-new-key", func(i int) engine.StartParams {
		return engine.StartParams{RunID: fmt.Sprintf("dedup-%d", i), Spec: spec, Input: in, DedupKey: fmt.Sprint(i), DedupWindow: time.Hour}
	})
	run("dedup-hit", func(i int) engine.StartParams {
		return engine.StartParams{RunID: fmt.Sprintf("hit-%d", i), Spec: spec, Input: in, DedupKey: "one", DedupWindow: time.Hour}
	})
	run("delayed", func(i int) engine.StartParams {
		return engine.StartParams{RunID: fmt.Sprintf("delayed-%d", i), Spec: spec, Input: in, Delay: time.Hour}
	})
	for i := range 64 {
		_, _, err := e.Start(ctx, engine.StartParams{RunID: "reused", Spec: spec, Input: json.RawMessage(fmt.Sprint(i)),
			OnConflict: event.ConflictTerminateExisting})
		require.NoError(b, err)
	}
	b.Run("latest-of-64-reuses", func(b *testing.B) {
		for b.Loop() {
			id, err := e.LatestRun(ctx, "reused")
			if err != nil || id != event.ReuseRunID("reused", 63) {
				b.Fatal(id, err)
			}
		}
	})
}
