package history_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/pkg/flow"
)

// A client reads an offloaded payload through the history service (flow.api.payloads.get),
// page by page when it is larger than one reply, and learns that a payload the store does not
// hold is not found.
func TestClientReadsPayloadsThroughTheHistoryService(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startHistory(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	store, err := objstore.Open(ctx, natstest.JetStream(t, srv), streams.PayloadsBucket, 0)
	require.NoError(t, err)
	nc := natstest.Connect(t, srv)
	c, err := flow.NewClient(ctx, nc, nil)
	require.NoError(t, err)

	// Three replies' worth and a bit, each byte different from its neighbours'.
	big := make([]byte, 3*nc.MaxPayload()+12345)
	for i := range big {
		big[i] = 'a' + byte(i%26)
	}
	big = append(append([]byte{'"'}, big...), '"')
	for _, data := range [][]byte{[]byte(`"small"`), big} {
		ref, err := store.Put(ctx, data)
		require.NoError(t, err)
		got, err := c.Payload(ctx, ref.JSON())
		require.NoError(t, err)
		require.True(t, bytes.Equal(data, got), "payload %s comes back as it was stored", ref)
	}

	// Not a reference: the value itself.
	got, err := c.Payload(ctx, json.RawMessage(`{"plain":1}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"plain":1}`, string(got))

	missing := payload.RefOf([]byte(`"never stored"`))
	_, err = c.Payload(ctx, missing.JSON())
	require.ErrorIs(t, err, payload.ErrNotFound)
	require.Contains(t, err.Error(), missing.SHA256)
}
