// Package typedkv is the JSON layer under Flow's bucket repositories: a Bucket[T] reads and
// writes a JetStream key-value bucket whose values are JSON T. A repository (definitions.Store,
// parked.Store, runsindex.Store, ...) wraps one, owns the bucket's key format and names its
// methods for its domain; services hold repositories, never a Bucket or a raw
// jetstream.KeyValue.
package typedkv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is a key-value bucket of T values, JSON unless its Codec says otherwise. It is safe
// for concurrent use.
type Bucket[T any] struct {
	kv  jetstream.KeyValue
	enc func(T) ([]byte, error)
	dec func([]byte) (T, error)
}

// Codec is how a bucket's values are written and read, for the repositories whose values are
// not plain JSON T: Decode may check a value and refuse it (its error is the Entry's Err). A nil
// Encode or Decode is JSON's.
type Codec[T any] struct {
	Encode func(T) ([]byte, error)
	Decode func(value []byte) (T, error)
}

// Open opens bucket name on js, its values JSON T; streams.Ensure creates Flow's buckets.
func Open[T any](ctx context.Context, js jetstream.JetStream, name string) (*Bucket[T], error) {
	return OpenCodec(ctx, js, name, Codec[T]{})
}

// OpenCodec opens bucket name on js, its values written and read by c.
func OpenCodec[T any](ctx context.Context, js jetstream.JetStream, name string, c Codec[T]) (*Bucket[T], error) {
	kv, err := js.KeyValue(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w (streams.Ensure creates it)", name, err)
	}
	return newBucket(kv, c), nil
}

// View returns b's bucket read and written as U values by c: for a repository that reads one
// bucket two ways (leniently and strictly) or keeps values of several types in it.
func View[U, T any](b *Bucket[T], c Codec[U]) *Bucket[U] { return newBucket(b.kv, c) }

func newBucket[T any](kv jetstream.KeyValue, c Codec[T]) *Bucket[T] {
	b := &Bucket[T]{kv: kv, enc: c.Encode, dec: c.Decode}
	if b.enc == nil {
		b.enc = func(v T) ([]byte, error) { return json.Marshal(v) }
	}
	if b.dec == nil {
		b.dec = decodeJSON[T]
	}
	return b
}

// Name returns the bucket's name.
func (b *Bucket[T]) Name() string { return b.kv.Bucket() }

// Entry is one entry of a bucket as read or watched.
type Entry[T any] struct {
	Key      string
	Value    T
	Revision uint64
	Created  time.Time
	// Deleted is set on a watched deletion or purge (Value is zero).
	Deleted bool
	// Err is set when the entry's value is not a JSON T (Value is zero): an entry some other
	// writer left, for the caller to skip, log or replace.
	Err error
}

func decodeJSON[T any](value []byte) (T, error) {
	var v T
	err := json.Unmarshal(value, &v)
	return v, err
}

// decodeWith makes e an Entry, its value decoded by dec: a deletion or a purge is Deleted, a
// value dec refuses has Err set and a zero Value.
func decodeWith[T any](e jetstream.KeyValueEntry, dec func([]byte) (T, error)) Entry[T] {
	out := Entry[T]{Key: e.Key(), Revision: e.Revision(), Created: e.Created()}
	if e.Operation() != jetstream.KeyValuePut {
		out.Deleted = true
		return out
	}
	v, err := dec(e.Value())
	if err != nil {
		err = fmt.Errorf("entry %s of bucket %s: %w", e.Key(), e.Bucket(), err)
		var zero T
		v = zero
	}
	out.Value, out.Err = v, err
	return out
}

// Get returns the entry of key; found is false when there is none. An entry whose value does
// not decode is returned found, with Err set.
func (b *Bucket[T]) Get(ctx context.Context, key string) (e Entry[T], found bool, err error) {
	kve, err := b.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry[T]{Key: key}, false, nil
	}
	if err != nil {
		return Entry[T]{Key: key}, false, err
	}
	return decodeWith(kve, b.dec), true, nil
}

// ErrEncode is wrapped by Put, Create, Update and CreateOrUpdate when the value does not
// encode: nothing is written.
var ErrEncode = errors.New("typedkv: the value does not encode")

func (b *Bucket[T]) encode(key string, v T) ([]byte, error) {
	val, err := b.enc(v)
	if err != nil {
		return nil, fmt.Errorf("%w: entry %s of bucket %s: %w", ErrEncode, key, b.kv.Bucket(), err)
	}
	return val, nil
}

// Put writes v under key, whatever is there, and returns the entry's new revision.
func (b *Bucket[T]) Put(ctx context.Context, key string, v T) (uint64, error) {
	val, err := b.encode(key, v)
	if err != nil {
		return 0, err
	}
	return b.kv.Put(ctx, key, val)
}

// Create writes v under key if key has no entry (or a deleted one), and returns the entry's
// revision; otherwise an error wrapping jetstream.ErrKeyExists.
func (b *Bucket[T]) Create(ctx context.Context, key string, v T) (uint64, error) {
	val, err := b.encode(key, v)
	if err != nil {
		return 0, err
	}
	return b.kv.Create(ctx, key, val)
}

// Update writes v under key if the entry is at revision rev, and returns its new revision;
// otherwise an error wrapping jetstream.ErrKeyExists or jetstream.ErrKeyRevisionMismatch
// (nats.go reports a lost compare-and-set either way, by server version).
func (b *Bucket[T]) Update(ctx context.Context, key string, v T, rev uint64) (uint64, error) {
	val, err := b.encode(key, v)
	if err != nil {
		return 0, err
	}
	return b.kv.Update(ctx, key, val, rev)
}

// Delete deletes key's entry, leaving a delete marker. With rev > 0 it deletes only the entry
// at that revision, else returns an error wrapping jetstream.ErrKeyRevisionMismatch or
// jetstream.ErrKeyExists.
func (b *Bucket[T]) Delete(ctx context.Context, key string, rev uint64) error {
	if rev == 0 {
		return b.kv.Delete(ctx, key)
	}
	return b.kv.Delete(ctx, key, jetstream.LastRevision(rev))
}

// CreateOrUpdate writes v under key by compare-and-set: if key has no entry when rev is 0
// (Create), else if its entry is at revision rev (Update). It returns the new revision, or an
// error that IsConflict reports when another writer was first.
func (b *Bucket[T]) CreateOrUpdate(ctx context.Context, key string, v T, rev uint64) (uint64, error) {
	if rev == 0 {
		return b.Create(ctx, key, v)
	}
	return b.Update(ctx, key, v, rev)
}

// IsConflict reports an error of Create, Update or a Delete at a revision that lost its
// compare-and-set: the entry exists, or is not at the revision given (nats.go reports either
// as jetstream.ErrKeyExists or as the server's wrong-last-sequence error, by server version).
func IsConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// Keys returns the keys that have an entry, sorted; with filters (NATS subject wildcards), the
// keys that match one of them.
func (b *Bucket[T]) Keys(ctx context.Context, filters ...string) ([]string, error) {
	if len(filters) == 0 {
		keys, err := b.kv.Keys(ctx)
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return keys, err
	}
	w, err := b.kv.WatchFiltered(ctx, filters, jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("listing the keys of bucket %s: %w", b.kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	var keys []string
	if err := initialValues(ctx, w, func(e jetstream.KeyValueEntry) { keys = append(keys, e.Key()) }); err != nil {
		if errors.Is(err, errWatchStopped) {
			err = fmt.Errorf("listing the keys of bucket %s: %w", b.kv.Bucket(), err)
		}
		return nil, err
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// errWatchStopped is initialValues' error for a watch that stopped before its initial values
// ended.
var errWatchStopped = errors.New("the watch stopped")

// initialValues calls each with every entry w delivers until the nil that ends its initial
// values. It returns errWatchStopped if w stops first, and ctx.Err() if ctx ends first.
func initialValues(ctx context.Context, w jetstream.KeyWatcher, each func(jetstream.KeyValueEntry)) error {
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return errWatchStopped
			}
			if e == nil {
				return nil
			}
			each(e)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Status returns the bucket's status as the server reports it (its TTL, ...).
func (b *Bucket[T]) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	return b.kv.Status(ctx)
}

// List returns the bucket's entries (deletions left out), read by one watch; with filters (NATS
// subject wildcards), the entries whose keys match one of them.
func (b *Bucket[T]) List(ctx context.Context, filters ...string) ([]Entry[T], error) {
	var w jetstream.KeyWatcher
	var err error
	if len(filters) == 0 {
		w, err = b.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	} else {
		w, err = b.kv.WatchFiltered(ctx, filters, jetstream.IgnoreDeletes())
	}
	if err != nil {
		return nil, fmt.Errorf("reading bucket %s: %w", b.kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	var out []Entry[T]
	err = initialValues(ctx, w, func(e jetstream.KeyValueEntry) { out = append(out, decodeWith(e, b.dec)) })
	if errors.Is(err, errWatchStopped) {
		err = fmt.Errorf("reading bucket %s: %w", b.kv.Bucket(), err)
	}
	return out, err
}

// Watcher delivers a bucket's entries as they change.
type Watcher[T any] struct {
	w       jetstream.KeyWatcher
	updates chan *Entry[T]
	stop    chan struct{}
	once    sync.Once
}

// Watch follows the bucket's entries: first every entry there is (deletions included unless
// opts ignore them), then nil, then each change as it is made, until Stop or the end of ctx,
// which close Updates.
func (b *Bucket[T]) Watch(ctx context.Context, opts ...jetstream.WatchOpt) (*Watcher[T], error) {
	return b.watch(ctx, nil, opts)
}

// WatchKeys is Watch for the keys that match filters (NATS subject wildcards).
func (b *Bucket[T]) WatchKeys(ctx context.Context, filters []string, opts ...jetstream.WatchOpt) (*Watcher[T], error) {
	return b.watch(ctx, filters, opts)
}

func (b *Bucket[T]) watch(ctx context.Context, filters []string, opts []jetstream.WatchOpt) (*Watcher[T], error) {
	var kw jetstream.KeyWatcher
	var err error
	if filters == nil {
		kw, err = b.kv.WatchAll(ctx, opts...)
	} else {
		kw, err = b.kv.WatchFiltered(ctx, filters, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("watching bucket %s: %w", b.kv.Bucket(), err)
	}
	return Follow(kw, b.dec), nil
}

// Follow delivers the entries of kw, a watch a repository opened on its bucket, as Entries
// whose values dec decodes (an entry dec refuses has Err set): the repositories whose values
// are not plain JSON T watch through it. kw's nil entry (the end of the initial values, when
// the watch has one) is delivered as nil. The Watcher owns kw: its Stop stops kw, and Updates
// closes once kw's updates close.
func Follow[T any](kw jetstream.KeyWatcher, dec func(value []byte) (T, error)) *Watcher[T] {
	w := &Watcher[T]{w: kw, updates: make(chan *Entry[T]), stop: make(chan struct{})}
	go func() {
		defer close(w.updates)
		for e := range kw.Updates() {
			var out *Entry[T]
			if e != nil {
				d := decodeWith(e, dec)
				out = &d
			}
			select {
			case w.updates <- out:
			case <-w.stop:
				return
			}
		}
	}()
	return w
}

// Updates returns the channel of changes: the entries there were, nil once they are all
// delivered, then each change.
func (w *Watcher[T]) Updates() <-chan *Entry[T] { return w.updates }

// Stop ends the watch; Updates is closed soon after. It may be called more than once.
func (w *Watcher[T]) Stop() error {
	var err error
	w.once.Do(func() {
		close(w.stop)
		err = w.w.Stop()
	})
	return err
}
