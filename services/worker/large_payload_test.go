package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/worker"
)

// largeSizes: inputs that cross NATS (run input, signal, update) are over the default offload
// threshold of 256 KiB and under max_payload; the step's output, made in the worker, is 2 MiB,
// twice max_payload.
const (
	largeIn  = 300 << 10
	largeOut = 2 << 20
)

// registerLarge registers workflow "large": step "grow" on the run's input (plus a suffix, so
// that a changed suffix is a changed large input), then an update and a signal, each large,
// then completes with the step's output. The step output is largeOut bytes.
func registerLarge(suffix string) func(*flow.Registry) {
	return func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "large", func(ctx *flow.Context, in string) (flow.Decision, error) {
			out, ok, err := flow.Output[string](ctx, "grow")
			if err != nil || !ok {
				return ctx.ScheduleStep("grow", "grow", in+suffix), err
			}
			sig := ctx.Signal("big")
			if sig == nil {
				return ctx.AwaitSignal("big", "big"), nil
			}
			var s string
			if err := json.Unmarshal(sig, &s); err != nil {
				return nil, err
			}
			if len(s) != largeIn || len(out) != largeOut+len(in)+len(suffix) {
				return ctx.Fail(errors.New("a payload came back with another length")), nil
			}
			return ctx.Complete(out), nil
		})
		flow.RegisterStep(reg, "grow", func(_ context.Context, in string) (string, error) {
			return in + strings.Repeat("y", largeOut), nil
		})
		flow.RegisterUpdate(reg, "large", "note", flow.UpdateHandler[string]{
			Complete: func(_ *flow.Context, _ *flow.Update, p string) (any, error) { return len(p), nil },
		})
	}
}

// countingGetter counts the payloads read through it, by hash.
type countingGetter struct {
	g    payload.Getter
	mu   sync.Mutex
	read map[string]int
}

func (c *countingGetter) Get(ctx context.Context, r payload.Ref) ([]byte, error) {
	c.mu.Lock()
	c.read[r.SHA256]++
	c.mu.Unlock()
	return c.g.Get(ctx, r)
}

// TestLargePayloads: on a real server, a run's large input, its step's large input and 8 MiB
// output, a large update and a large signal are each offloaded to FLOW_PAYLOADS, the history
// holding references; workflow and step code see the bytes, the client's Result resolves the
// run's output and ResolvePayloads a snapshot's references, and the history replays deterministically, comparing the large step input by
// hash without reading it. Code that schedules the step with a changed large input is a
// non-determinism error that names the input and shows both hashes.
func TestLargePayloads(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	b := setupOn(t, srv, registerLarge("!"), worker.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	in := strings.Repeat("x", largeIn)
	runID, err := b.client.Start(ctx, "large", in, &flow.StartOptions{RunID: "large-1"})
	require.NoError(t, err)
	up, err := b.client.Update(ctx, runID, "note", strings.Repeat("u", largeIn), &flow.UpdateOptions{Wait: true})
	require.NoError(t, err)
	require.JSONEq(t, `307200`, string(up.Result))
	_, err = b.client.Signal(ctx, runID, "big", strings.Repeat("s", largeIn), nil)
	require.NoError(t, err)

	var out string
	require.NoError(t, b.client.Result(ctx, runID, &out))
	require.Equal(t, in+"!"+strings.Repeat("y", largeOut), out)

	// A snapshot shows references; ResolvePayloads puts the bytes in their place.
	snap, err := b.client.Snapshot(ctx, runID)
	require.NoError(t, err)
	require.True(t, payload.IsRef(snap.Steps["grow"].Output))
	require.NoError(t, b.client.ResolvePayloads(ctx, snap))
	require.JSONEq(t, `"`+in+`"`, string(snap.Input))
	require.Equal(t, `"`+in+"!"+strings.Repeat("y", largeOut)+`"`, string(snap.Steps["grow"].Output))
	require.Equal(t, snap.Steps["grow"].Output, snap.Outcome.Output)
	require.Len(t, snap.Signals, 1)
	require.Len(t, snap.Signals[0].Payload, largeIn+2)

	// The history holds references, each to an object of the bucket.
	js, err := jetstream.New(natstest.Connect(t, srv))
	require.NoError(t, err)
	st, err := jsstore.New(ctx, js, nil)
	require.NoError(t, err)
	hist, err := st.Load(ctx, runID, 0)
	require.NoError(t, err)
	store, err := objstore.Open(ctx, js, streams.PayloadsBucket, 0)
	require.NoError(t, err)
	refs := map[string]json.RawMessage{}
	var stepInput payload.Ref
	for _, e := range hist {
		switch p := e.Payload.(type) {
		case *event.RunStarted:
			refs["run input"] = p.Input
		case *event.StepScheduled:
			refs["step input"] = p.Steps[0].Input
			stepInput, _ = payload.Parse(p.Steps[0].Input)
		case *event.StepCompleted:
			refs["step output"] = p.Output
		case *event.UpdateReceived:
			refs["update payload"] = p.Payload
		case *event.SignalReceived:
			refs["signal payload"] = p.Payload
		case *event.RunCompleted:
			refs["run output"] = p.Output
		}
	}
	require.Len(t, refs, 6)
	for what, raw := range refs {
		r, ok := payload.Parse(raw)
		require.True(t, ok, "the history holds the %s inline: %.80s", what, raw)
		has, err := store.Has(ctx, r)
		require.NoError(t, err)
		require.True(t, has, "the %s's object %s is not in the bucket", what, r)
	}
	require.Equal(t, refs["step output"], refs["run output"], "the same bytes, the same object")
	got, err := store.Get(ctx, stepInput)
	require.NoError(t, err)
	require.Equal(t, `"`+in+`!"`, string(got))

	// Replay: the same code decides the same; the step's large input is compared by hash.
	replay := func(suffix string) (*countingGetter, error) {
		reg := flow.NewRegistry(nil)
		registerLarge(suffix)(reg)
		cg := &countingGetter{g: store, read: map[string]int{}}
		sdk.RuntimeOf(reg).UsePayloads(cg)
		_, err := core.Replay(runID, hist, sdk.RuntimeOf(reg).Replaying(), core.DecideOptions{})
		return cg, err
	}
	cg, err := replay("!")
	require.NoError(t, err)
	require.Zero(t, cg.read[stepInput.SHA256], "the replay read the recorded step input")

	_, err = replay("?")
	var nd *core.NonDeterminismError
	require.True(t, errors.As(err, &nd), "got %v", err)
	require.Equal(t, "step", nd.Kind)
	require.Equal(t, "grow", nd.ID)
	require.Equal(t, "input", nd.Field)
	newRef := payload.RefOf([]byte(`"` + in + `?"`))
	require.Equal(t, string(stepInput.JSON()), nd.Recorded, "the recorded input, by reference")
	require.Equal(t, string(newRef.JSON()), nd.New, "the new input, by the reference it would have")
	require.NotEqual(t, stepInput.SHA256, newRef.SHA256)
	require.Contains(t, err.Error(), stepInput.SHA256)
	require.Contains(t, err.Error(), newRef.SHA256)
}
