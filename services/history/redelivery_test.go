package history_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/services/history"
)

// A replica that took a run's first commit and died without applying or acknowledging it
// leaves the commit to JetStream's redelivery, which comes after the run's later commits: the
// replica that goes on reads the run's history on the later commit and must derive the first
// commit's consequences then (here the queue entry of a run under flow control), since it takes
// the redelivered first commit for one it applied. Found by the torture test: a reset run whose
// first commit a history service killed to be armed with a fault had taken never queued.
func TestFirstCommitRedeliveredAfterLaterOnes(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	ctx := t.Context()
	cfg := history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet, ReconcileInterval: -1, AckWait: 3 * time.Second}
	first, err := history.New(cfg)
	require.NoError(t, err)
	require.NoError(t, first.Start(ctx)) // creates the streams and the service's consumer
	js := natstest.JetStream(t, srv)
	st, err := jsstore.New(ctx, js, nil)
	require.NoError(t, err)
	// A run the index holds, so that the next service's start finds nothing to rebuild.
	_, err = st.Append(ctx, "other-1", 0, event.Event{Time: time.Now(), Payload: &event.RunStarted{Spec: event.Spec{Definition: "plain"},
		Input: json.RawMessage(`{}`), Seed: "seed"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := first.IndexedEntry("other-1"); return ok }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, first.Stop())

	const run = "queued-1"
	started := &event.RunStarted{Spec: event.Spec{Definition: "limited"}, Input: json.RawMessage(`{}`), Seed: "seed",
		Control: &event.FlowControl{Group: "limited", Concurrency: 1}}
	_, err = st.Append(ctx, run, 0, event.Event{Time: time.Now(), Payload: started})
	require.NoError(t, err)
	// The dead replica: it takes the first commit and never acknowledges it.
	cons, err := js.Consumer(ctx, streams.History, streams.HistoryConsumer)
	require.NoError(t, err)
	taken, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	msg := <-taken.Messages()
	require.NotNil(t, msg)
	require.Equal(t, streams.Layout{}.Subject(run), msg.Subject())
	_, err = st.Append(ctx, run, 1, event.Event{Time: time.Now(), Payload: &event.SignalReceived{Name: "poke", Payload: json.RawMessage(`1`), DeliveryID: "d1"}})
	require.NoError(t, err)

	cfg.Conn = natstest.Connect(t, srv)
	second, err := history.New(cfg)
	require.NoError(t, err)
	require.NoError(t, second.Start(ctx))
	t.Cleanup(func() { require.NoError(t, second.Stop()) })
	queue, err := js.KeyValue(ctx, streams.QueueBucket)
	require.NoError(t, err)
	// The later commit is applied first; the first one is redelivered once its ack wait is over.
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}, 20*time.Second, 10*time.Millisecond, "the first commit is redelivered and acknowledged")
	sum, ok := second.IndexedEntry(run)
	require.True(t, ok)
	require.Equal(t, core.StatusQueued, sum.Status)
	_, err = queue.Get(ctx, run)
	require.NoError(t, err, "the run waits for admission: it has its queue entry")
}
