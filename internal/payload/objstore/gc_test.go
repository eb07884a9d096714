package objstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/payload/objstore"
)

// TestCollectorDeletes: a Put of an object there already touches it (its modification time
// moves on); a deletion happens only for an object not written or touched since the cutoff and
// since the collector read it; it leaves no record, and the same bytes are stored again later.
// A deletion left half done is listed and finished.
func TestCollectorDeletes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	js := natstest.JetStream(t, natstest.RunJetStream(t))
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}))
	s, err := objstore.Open(ctx, js, streams.PayloadsBucket, 16)
	require.NoError(t, err)
	s.SetCacheBytes(0)
	data := []byte(`"` + strings.Repeat("p", 2000) + `"`)
	r, err := s.Put(ctx, data)
	require.NoError(t, err)
	one := func() objstore.Object {
		objs, err := s.Objects(ctx)
		require.NoError(t, err)
		require.Len(t, objs, 1)
		return objs[0]
	}
	first := one()
	require.Equal(t, r.Name(), first.Name)
	require.Equal(t, uint64(len(data)), first.Size)

	_, deleted, err := s.DeleteUnchanged(ctx, r.Name(), first.ModTime)
	require.NoError(t, err)
	require.False(t, deleted, "not older than the cutoff")

	_, err = s.Put(ctx, data) // a touch
	require.NoError(t, err)
	touched := one()
	require.True(t, touched.ModTime.After(first.ModTime), "a touch makes the object new: %s, then %s", first.ModTime, touched.ModTime)
	_, deleted, err = s.DeleteUnchanged(ctx, r.Name(), touched.ModTime)
	require.NoError(t, err)
	require.False(t, deleted)

	// Touched between the collector's read and its deletion: kept.
	faults := &fault.Injector{}
	s.SetFaults(faults)
	faults.ArmFunc(fault.PayloadGCBeforeDelete, 1, func() {
		_, err := s.Put(ctx, data)
		require.NoError(t, err)
	})
	future := time.Now().Add(time.Hour)
	_, deleted, err = s.DeleteUnchanged(ctx, r.Name(), future)
	require.NoError(t, err)
	require.False(t, deleted, "the touch made the conditional deletion fail")
	has, err := s.Has(ctx, r)
	require.NoError(t, err)
	require.True(t, has)
	got, err := s.Get(ctx, r)
	require.NoError(t, err)
	require.Equal(t, data, got)

	size, deleted, err := s.DeleteUnchanged(ctx, r.Name(), future)
	require.NoError(t, err)
	require.True(t, deleted)
	require.Equal(t, uint64(len(data)), size)
	has, err = s.Has(ctx, r)
	require.NoError(t, err)
	require.False(t, has)
	objs, err := s.Objects(ctx)
	require.NoError(t, err)
	require.Empty(t, objs, "no deletion record is left")
	st, err := js.Stream(ctx, "OBJ_"+streams.PayloadsBucket)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "chunks and metadata are purged")

	// Stored again, it reads back.
	_, err = s.Put(ctx, data)
	require.NoError(t, err)
	got, err = s.Get(ctx, r)
	require.NoError(t, err)
	require.Equal(t, data, got)

	// A deletion record left by a collector that stopped after it.
	writeDeletionRecord(t, ctx, js, r.Name())
	require.True(t, one().Deleted)
	finished, err := s.FinishDelete(ctx, r.Name())
	require.NoError(t, err)
	require.True(t, finished)
	objs, err = s.Objects(ctx)
	require.NoError(t, err)
	require.Empty(t, objs)
	finished, err = s.FinishDelete(ctx, r.Name())
	require.NoError(t, err)
	require.False(t, finished)
}
