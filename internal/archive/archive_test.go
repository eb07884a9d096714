package archive_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/archive"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/payload"
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
			where, err := a.Put(ctx, runID, history(runID), nil)
			require.NoError(t, err, spec)
			where2, err := a.Put(ctx, runID, history(runID), nil) // a repeat after a crash
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

// TestArchivesHoldPayloads: an archive holds the history as stored (references included) and
// the bytes of every payload it refers to, once each, checked on reading; Read returns the
// history alone, as before the deletion. A payload that is lost is left out; an archive written
// before archives held payloads still reads, says so, and Rewrite upgrades it in place.
func TestArchivesHoldPayloads(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	js := natstest.JetStream(t, srv)
	ctx := context.Background()
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}))
	in, out, lost := []byte(`{"doc":"`+strings.Repeat("i", 3000)+`"}`), []byte(`"`+strings.Repeat("o", 3000)+`"`), []byte(`"lost"`)
	store := map[string][]byte{payload.RefOf(in).SHA256: in, payload.RefOf(out).SHA256: out}
	reads := 0
	get := func(_ context.Context, r payload.Ref) ([]byte, error) {
		reads++
		return store[r.SHA256], nil // nil for the lost one
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	hist := func(runID string) []event.Envelope {
		return []event.Envelope{
			{RunID: runID, Seq: 1, Time: at, Payload: &event.RunStarted{Spec: event.Spec{Definition: "order"}, Input: payload.RefOf(in).JSON(), Seed: "0123456789abcdef"}},
			{RunID: runID, Seq: 2, Time: at, Payload: &event.SignalReceived{Name: "s", Payload: payload.RefOf(lost).JSON(), DeliveryID: "d"}},
			{RunID: runID, Seq: 3, Time: at, Payload: &event.SignalReceived{Name: "s", Payload: payload.RefOf(in).JSON(), DeliveryID: "e"}},
			{RunID: runID, Seq: 4, Time: at.Add(time.Second), Payload: &event.RunCompleted{Output: payload.RefOf(out).JSON()}},
		}
	}
	dir := t.TempDir()
	for _, spec := range []string{archive.ObjectStore, archive.DirPrefix + dir} {
		a, err := archive.Open(ctx, js, spec)
		require.NoError(t, err)
		reads = 0
		where, err := a.Put(ctx, "big-1", hist("big-1"), get)
		require.NoError(t, err, spec)
		require.Equal(t, 3, reads, "each payload is read once")
		got, err := archive.Read(ctx, js, where)
		require.NoError(t, err)
		require.Equal(t, encoded(t, hist("big-1")), encoded(t, got), "the history as stored, references included")
		all, err := archive.ReadAll(ctx, js, where)
		require.NoError(t, err)
		require.True(t, all.SelfContained)
		require.Equal(t, encoded(t, hist("big-1")), encoded(t, all.History))
		require.Equal(t, store, all.Payloads, "the payloads it refers to, but the lost one")
		ok, err := archive.SelfContained(ctx, js, where)
		require.NoError(t, err)
		require.True(t, ok)

		// A payload read that fails stops the write.
		_, err = a.Put(ctx, "big-2", hist("big-2"), func(context.Context, payload.Ref) ([]byte, error) { return nil, errors.New("store down") })
		require.ErrorContains(t, err, "store down")
	}

	// An archive of the first format: a bare array of envelopes.
	obs, err := js.ObjectStore(ctx, archive.Bucket)
	require.NoError(t, err)
	_, err = obs.PutBytes(ctx, "old-1", []byte(encoded(t, hist("old-1"))))
	require.NoError(t, err)
	old := "objectstore:" + archive.Bucket + "/old-1"
	oldFile := filepath.Join(dir, "old-2.json")
	require.NoError(t, os.WriteFile(oldFile, []byte(encoded(t, hist("old-2"))), 0o600))
	for runID, where := range map[string]string{"old-1": old, "old-2": archive.DirPrefix + oldFile} {
		ok, err := archive.SelfContained(ctx, js, where)
		require.NoError(t, err)
		require.False(t, ok, where)
		all, err := archive.ReadAll(ctx, js, where)
		require.NoError(t, err)
		require.False(t, all.SelfContained)
		require.Empty(t, all.Payloads)
		require.Equal(t, encoded(t, hist(runID)), encoded(t, all.History))

		require.NoError(t, archive.Rewrite(ctx, js, where, all.History, get))
		ok, err = archive.SelfContained(ctx, js, where)
		require.NoError(t, err)
		require.True(t, ok, where)
		all, err = archive.ReadAll(ctx, js, where)
		require.NoError(t, err)
		require.Equal(t, store, all.Payloads)
		require.Equal(t, encoded(t, hist(runID)), encoded(t, all.History))
	}

	// A payload whose bytes do not match its name is refused on reading.
	bad := `{"format":2,"history":` + encoded(t, hist("bad")) + `,"payloads":{"` + payload.RefOf(in).SHA256 + `":"tampered"}}`
	_, err = obs.PutBytes(ctx, "bad", []byte(bad))
	require.NoError(t, err)
	_, err = archive.ReadAll(ctx, js, "objectstore:"+archive.Bucket+"/bad")
	require.ErrorContains(t, err, "SHA-256")
	_, err = archive.Read(ctx, js, "objectstore:"+archive.Bucket+"/bad")
	require.NoError(t, err, "the history alone reads without the payloads")
	require.True(t, json.Valid([]byte(bad)))
}
