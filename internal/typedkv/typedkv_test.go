package typedkv_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/typedkv"
)

type rec struct {
	Name string `json:"name"`
	N    int    `json:"n"`
}

func open(t *testing.T) (*typedkv.Bucket[rec], jetstream.KeyValue) {
	t.Helper()
	js := natstest.JetStream(t, natstest.RunJetStream(t))
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "T"})
	require.NoError(t, err)
	b, err := typedkv.Open[rec](t.Context(), js, "T")
	require.NoError(t, err)
	return b, kv
}

// Values are JSON; writes by revision fail once the entry changed; an entry that is not JSON is
// read with Err set.
func TestBucketReadsAndWrites(t *testing.T) {
	ctx := t.Context()
	b, raw := open(t)
	require.Equal(t, "T", b.Name())
	_, found, err := b.Get(ctx, "a")
	require.NoError(t, err)
	require.False(t, found)

	rev, err := b.Create(ctx, "a", rec{Name: "a", N: 1})
	require.NoError(t, err)
	_, err = b.Create(ctx, "a", rec{Name: "a", N: 2})
	require.ErrorIs(t, err, jetstream.ErrKeyExists)
	e, found, err := b.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, typedkv.Entry[rec]{Key: "a", Value: rec{Name: "a", N: 1}, Revision: rev, Created: e.Created}, e)

	rev2, err := b.Update(ctx, "a", rec{Name: "a", N: 3}, rev)
	require.NoError(t, err)
	_, err = b.Update(ctx, "a", rec{Name: "a", N: 4}, rev)
	require.True(t, errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch), "%v", err)
	require.Error(t, b.Delete(ctx, "a", rev), "a delete at a stale revision")
	require.NoError(t, b.Delete(ctx, "a", rev2))
	_, found, err = b.Get(ctx, "a")
	require.NoError(t, err)
	require.False(t, found)

	_, err = b.Put(ctx, "b", rec{Name: "b"})
	require.NoError(t, err)
	_, err = raw.Put(ctx, "c", []byte("not json"))
	require.NoError(t, err)
	e, found, err = b.Get(ctx, "c")
	require.NoError(t, err)
	require.True(t, found)
	require.Error(t, e.Err)

	keys, err := b.Keys(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"b", "c"}, keys)
	list, err := b.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, rec{Name: "b"}, list[0].Value)
	require.Error(t, list[1].Err)
}

// A watch delivers the entries there are, nil, then each change, deletions included.
func TestBucketWatch(t *testing.T) {
	ctx := t.Context()
	b, _ := open(t)
	_, err := b.Put(ctx, "a", rec{Name: "a"})
	require.NoError(t, err)
	w, err := b.Watch(ctx)
	require.NoError(t, err)
	next := func() *typedkv.Entry[rec] { t.Helper(); return nextUpdate(t, w) }
	require.Equal(t, rec{Name: "a"}, next().Value)
	require.Nil(t, next())
	_, err = b.Put(ctx, "b", rec{Name: "b", N: 1})
	require.NoError(t, err)
	e := next()
	require.Equal(t, "b", e.Key)
	require.Equal(t, 1, e.Value.N)
	require.NoError(t, b.Delete(ctx, "a", 0))
	e = next()
	require.Equal(t, "a", e.Key)
	require.True(t, e.Deleted)
	require.NoError(t, w.Stop())
	require.NoError(t, w.Stop())
	require.Eventually(t, func() bool {
		select {
		case _, ok := <-w.Updates():
			return !ok
		default:
			return false
		}
	}, 5*time.Second, 10*time.Millisecond, "Updates closes after Stop")
}

// Follow decodes a repository's watch with its own decoder: a value it refuses has Err set, a
// deletion is Deleted, and nil ends the initial values.
func TestFollowDecodes(t *testing.T) {
	ctx := t.Context()
	_, raw := open(t)
	_, err := raw.Put(ctx, "a", []byte("1"))
	require.NoError(t, err)
	kw, err := raw.WatchAll(ctx)
	require.NoError(t, err)
	w := typedkv.Follow(kw, func(v []byte) (int, error) {
		if string(v) == "bad" {
			return 7, errors.New("refused")
		}
		return len(v), nil
	})
	defer func() { _ = w.Stop() }()
	next := func() *typedkv.Entry[int] { t.Helper(); return nextUpdate(t, w) }
	e := next()
	require.Equal(t, "a", e.Key)
	require.Equal(t, 1, e.Value)
	require.NoError(t, e.Err)
	require.Nil(t, next())
	_, err = raw.Put(ctx, "b", []byte("bad"))
	require.NoError(t, err)
	e = next()
	require.Error(t, e.Err)
	require.Zero(t, e.Value, "a refused value is zero")
	require.NoError(t, raw.Delete(ctx, "a"))
	e = next()
	require.True(t, e.Deleted)
	require.Equal(t, "a", e.Key)
}

// A Codec writes and reads a bucket's values its own way, a View reads the same bucket another
// way, Keys filters by subject, CreateOrUpdate is Create at revision 0 and Update after, and
// IsConflict reports the compare-and-set a writer lost.
func TestCodecViewKeysAndConflicts(t *testing.T) {
	ctx := t.Context()
	js := natstest.JetStream(t, natstest.RunJetStream(t))
	raw, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "C", TTL: time.Minute})
	require.NoError(t, err)
	b, err := typedkv.OpenCodec(ctx, js, "C", typedkv.Codec[string]{
		Encode: func(s string) ([]byte, error) { return []byte(s), nil },
		Decode: func(v []byte) (string, error) {
			if len(v) == 0 {
				return "", errors.New("empty")
			}
			return string(v), nil
		},
	})
	require.NoError(t, err)

	rev, err := b.CreateOrUpdate(ctx, "g.a", "one", 0)
	require.NoError(t, err)
	_, err = b.CreateOrUpdate(ctx, "g.a", "again", 0)
	require.True(t, typedkv.IsConflict(err), "%v", err)
	rev, err = b.CreateOrUpdate(ctx, "g.a", "two", rev)
	require.NoError(t, err)
	_, err = b.CreateOrUpdate(ctx, "g.a", "stale", rev-1)
	require.True(t, typedkv.IsConflict(err), "%v", err)
	require.True(t, typedkv.IsConflict(b.Delete(ctx, "g.a", rev-1)))
	require.False(t, typedkv.IsConflict(nil))
	require.False(t, typedkv.IsConflict(errors.New("other")))
	_, err = typedkv.View(b, typedkv.Codec[string]{Encode: func(string) ([]byte, error) { return nil, errors.New("no") }}).Put(ctx, "g.x", "x")
	require.ErrorIs(t, err, typedkv.ErrEncode)

	v, err := raw.Get(ctx, "g.a")
	require.NoError(t, err)
	require.Equal(t, "two", string(v.Value()), "the codec's encoding is stored")
	e, found, err := b.Get(ctx, "g.a")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "two", e.Value)
	_, err = raw.Put(ctx, "s.b", nil)
	require.NoError(t, err)
	e, _, err = b.Get(ctx, "s.b")
	require.NoError(t, err)
	require.Error(t, e.Err, "the codec's decoder refuses the value")

	n := typedkv.View(b, typedkv.Codec[int]{Decode: func(v []byte) (int, error) { return len(v), nil }})
	ne, found, err := n.Get(ctx, "g.a")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, 3, ne.Value)
	_, err = n.Put(ctx, "g.c", 12)
	require.NoError(t, err)
	v, err = raw.Get(ctx, "g.c")
	require.NoError(t, err)
	require.Equal(t, "12", string(v.Value()), "a View without an encoder writes JSON")

	keys, err := b.Keys(ctx, "g.>")
	require.NoError(t, err)
	require.Equal(t, []string{"g.a", "g.c"}, keys)
	keys, err = b.Keys(ctx, "x.>")
	require.NoError(t, err)
	require.Empty(t, keys)
	keys, err = b.Keys(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"g.a", "g.c", "s.b"}, keys, "nothing was written for the value that did not encode")
	list, err := n.List(ctx, "g.*")
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "g.a", list[0].Key)
	require.Equal(t, len("12"), list[1].Value, "the View decodes with its own decoder")

	st, err := b.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, time.Minute, st.TTL())
}

// nextUpdate returns w's next update, failing t if none comes within 5 seconds or w closed.
func nextUpdate[T any](t *testing.T, w *typedkv.Watcher[T]) *typedkv.Entry[T] {
	t.Helper()
	select {
	case e, ok := <-w.Updates():
		require.True(t, ok)
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no update")
		return nil
	}
}
