package torture

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natstest"
)

// A state read while the history service acknowledged a commit counts it as pending, although
// the consumer shows nothing pending at the end of the read: the buckets were read before the
// service wrote what the commit caused. Found as O1 (an index entry a seq behind its run's end)
// and O2 (the queue entry of an admitted run), both judged on such a read.
func TestReadStateWhileTheServiceApplies(t *testing.T) {
	srv := natstest.RunJetStream(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}))
	cons, err := js.CreateOrUpdateConsumer(ctx, streams.History, jetstream.ConsumerConfig{Durable: streams.HistoryConsumer,
		AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: streams.AllRuns})
	require.NoError(t, err)

	st, err := ReadState(ctx, js)
	require.NoError(t, err)
	require.Zero(t, st.Pending+st.AckPending, "nothing was written")

	_, err = js.Publish(ctx, streams.Layout{}.Subject("r1"), []byte(`{}`))
	require.NoError(t, err)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	msg := <-batch.Messages()
	require.NotNil(t, msg)
	afterBuckets = func() { require.NoError(t, msg.DoubleAck(ctx)) }
	t.Cleanup(func() { afterBuckets = nil })

	st, err = ReadState(ctx, js)
	require.NoError(t, err)
	require.NotZero(t, st.Pending+st.AckPending, "the commit was acknowledged while the buckets were read")

	afterBuckets = nil
	st, err = ReadState(ctx, js)
	require.NoError(t, err)
	require.Zero(t, st.Pending+st.AckPending, "read again once the service is done")
}
