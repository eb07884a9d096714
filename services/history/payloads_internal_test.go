package history

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/payload/objstore"
)

// A large payload's read waits for one of the largeReads slots (here all taken) and gives up
// when its context ends, while a small payload's read does not wait; once a slot is free the
// large read is served and kept for the next pages.
func TestLargePayloadReadsWaitForASlot(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t, natstest.RunJetStream(t))
	require.NoError(t, streams.Ensure(t.Context(), js, streams.Config{}))
	store, err := objstore.Open(t.Context(), js, streams.PayloadsBucket, 0)
	require.NoError(t, err)
	largeBytes := bytes.Repeat([]byte("L"), objstore.DefaultCacheBytes/4+1)
	large, err := store.Put(t.Context(), largeBytes)
	require.NoError(t, err)
	small, err := store.Put(t.Context(), []byte(`"small"`))
	require.NoError(t, err)

	s := &Service{js: js}
	s.payloadReads.reading = make(chan struct{}, 1)
	s.payloadReads.reading <- struct{}{} // another large read holds the only slot

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = s.payloadReads.get(ctx, s, large)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "large payloads are being read")
	b, err := s.payloadReads.get(t.Context(), s, small)
	require.NoError(t, err)
	require.Equal(t, `"small"`, string(b))

	<-s.payloadReads.reading
	b, err = s.payloadReads.get(t.Context(), s, large)
	require.NoError(t, err)
	require.Equal(t, largeBytes, b)
	require.Empty(t, s.payloadReads.reading, "the read gave its slot back")
	kept, ok := s.payloadReads.kept(large)
	require.True(t, ok, "a large payload is kept for its next pages")
	require.Len(t, kept, len(largeBytes))
}
