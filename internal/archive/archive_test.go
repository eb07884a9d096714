package archive_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/archive"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/streams"
	"github.com/flowrun/flow/pkg/event"
)

func history(runID string) []event.Envelope {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	return []event.Envelope{
		{RunID: runID, Seq: 1, Time: at, Payload: &event.RunStarted{Spec: event.Spec{Definition: "order"}, Input: []byte(`{"sku":"a"}`), Seed: "0123456789abcdef"}},
		{RunID: runID, Seq: 2, Time: at.Add(time.Second), Payload: &event.RunCompleted{Output: []byte(`"done"`)}},
	}
}

func encoded(t *testing.T, hist []event.Envelope) string {
	t.Helper()
	b, err := event.MarshalEnvelopes(hist)
	require.NoError(t, err)
	return string(b)
}

// TestArchives: both archives write a history that Read returns whole, from the location Put
// returned; writing again replaces it; a missing archive wraps ErrNotArchived.
func TestArchives(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	js := natstest.JetStream(t, srv)
	ctx := context.Background()
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}))
	dir := t.TempDir()
	long := strings.Repeat("r", 300) + "=child"
	for _, spec := range []string{archive.ObjectStore, archive.DirPrefix + dir} {
		a, err := archive.Open(ctx, js, spec)
		require.NoError(t, err)
		for _, runID := range []string{"order-1", long} {
			where, err := a.Put(ctx, runID, history(runID))
			require.NoError(t, err, spec)
			where2, err := a.Put(ctx, runID, history(runID)) // a repeat after a crash
			require.NoError(t, err)
			require.Equal(t, where, where2)
			got, err := archive.Read(ctx, js, where)
			require.NoError(t, err, where)
			require.Equal(t, encoded(t, history(runID)), encoded(t, got))
		}
	}
	_, err := os.Stat(filepath.Join(dir, "order-1.json"))
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temporary files are left")

	_, err = archive.Read(ctx, js, "objectstore:FLOW_ARCHIVE/nope")
	require.ErrorIs(t, err, archive.ErrNotArchived)
	_, err = archive.Read(ctx, js, archive.DirPrefix+filepath.Join(dir, "nope.json"))
	require.ErrorIs(t, err, archive.ErrNotArchived)

	off, err := archive.Open(ctx, js, archive.Off)
	require.NoError(t, err)
	require.Nil(t, off)
	for _, bad := range []string{"s3://bucket", "dir:", "dir:relative/path"} {
		_, err := archive.Open(ctx, js, bad)
		require.Error(t, err, bad)
	}
}
