package history_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/definitions"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/parked"
	"github.com/flowrun/flow/pkg/flow"
)

// A worker that found no live worker for a run, and then parked it, can write the parked entry
// after a worker that registers the run's definition started: the service dispatches the run
// when it learns of the entry, instead of waiting for a registration that already came.
func TestRunParkedAfterItsRegistrationIsDispatched(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startHistory(t, srv)
	ctx := t.Context()
	js := natstest.JetStream(t, srv)
	defs, err := js.KeyValue(ctx, streams.DefinitionsBucket)
	require.NoError(t, err)
	registered := time.Now().UTC()
	b, err := json.Marshal(definitions.Definition{Definition: "steps", Queue: streams.DefaultQueue, UpdatedAt: registered})
	require.NoError(t, err)
	_, err = defs.Put(ctx, definitions.Key(streams.DefaultQueue, "steps"), b)
	require.NoError(t, err)
	client, err := flow.NewClient(ctx, natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	runID := ingresstest.Accepted(t, natstest.Connect(t, srv), "steps", "parked-late", 1, "")

	parkedKV, err := js.KeyValue(ctx, streams.ParkedBucket)
	require.NoError(t, err)
	b, err = json.Marshal(parked.Run{RunID: runID, Queue: streams.DefaultQueue, Definition: "steps",
		Reason: `waiting for a worker that registers workflow "steps"`, Seq: 1, ParkedAt: registered.Add(-time.Second)})
	require.NoError(t, err)
	_, err = parkedKV.Put(ctx, runID, b)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := parkedKV.Get(ctx, runID); return errors.Is(err, jetstream.ErrKeyNotFound) },
		20*time.Second, 10*time.Millisecond, "the run was dispatched and its parked entry removed")

	startWorker(t, srv, registry(""))
	var out int
	require.NoError(t, client.Result(ctx, runID, &out))
}
