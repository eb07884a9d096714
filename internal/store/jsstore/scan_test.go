package jsstore_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
)

// TestScanAll: a scan reads every message of every run once, in stream order, across batches
// and the gaps a purge leaves, to the stream's last sequence; an error from its callback stops it.
func TestScanAll(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	js := natstest.JetStream(t, natstest.RunJetStream(t))
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}))
	s, err := jsstore.New(ctx, js, nil)
	require.NoError(t, err)
	for i := range 3 {
		evs := []event.Event{started()}
		for j := range 900 {
			evs = append(evs, signal(fmt.Sprintf("d%d", j)))
		}
		_, err := s.BulkAppend(ctx, fmt.Sprintf("scan-%d", i), 0, evs, 1)
		require.NoError(t, err)
	}
	st, err := js.Stream(ctx, streams.History)
	require.NoError(t, err)
	require.NoError(t, st.Purge(ctx, jetstream.WithPurgeSubject(streams.Layout{}.Subject("scan-1"))))
	info, err := st.Info(ctx)
	require.NoError(t, err)

	var seqs []uint64
	last, err := s.ScanAll(ctx, func(m *jetstream.RawStreamMsg) error {
		require.NotEqual(t, streams.Layout{}.Subject("scan-1"), m.Subject, "purged")
		seqs = append(seqs, m.Sequence)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, info.State.LastSeq, last)
	require.Len(t, seqs, int(info.State.Msgs))
	for i := 1; i < len(seqs); i++ {
		require.Less(t, seqs[i-1], seqs[i], "in stream order, each once")
	}

	stop := errors.New("enough")
	n := 0
	_, err = s.ScanAll(ctx, func(*jetstream.RawStreamMsg) error {
		n++
		if n == 10 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 10, n)
}
