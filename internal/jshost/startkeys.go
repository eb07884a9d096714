package jshost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
)

// StartKeys implements engine.StartKeys on the FLOW_START_KEYS bucket: create-only entries
// (KeyValue.Create), replaced and released only at the revision read, with a per-key TTL for
// dedup windows (the bucket keeps limit markers, which per-key TTLs need). It is safe for
// concurrent use, by any number of processes; in a deployment only the history service uses it
// (the bucket's one writer), and the ingress asks it (RemoteStartKeys).
type StartKeys struct {
	kv jetstream.KeyValue
}

var _ engine.StartKeys = (*StartKeys)(nil)

// NewStartKeys opens the bucket on js. Flow's streams must exist.
func NewStartKeys(ctx context.Context, js jetstream.JetStream) (*StartKeys, error) {
	kv, err := js.KeyValue(ctx, streams.StartKeysBucket)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w (start `flow dev` or a worker to create Flow's streams)", streams.StartKeysBucket, err)
	}
	return &StartKeys{kv: kv}, nil
}

// ErrMalformedStartKey is wrapped by the error of a claim that found an entry that is not a
// start key entry: an operator deletes it, and the next start claims the key.
var ErrMalformedStartKey = errors.New("malformed start key entry")

// minKeyTTL is the shortest per-key TTL the server takes; a shorter window keeps its entry this
// long, and the entry's Until still ends the window on time.
const minKeyTTL = time.Second

func keyTTL(ttl time.Duration) []jetstream.KVCreateOpt {
	if ttl <= 0 {
		return nil
	}
	return []jetstream.KVCreateOpt{jetstream.KeyTTL(max(ttl, minKeyTTL))}
}

// ClaimKey implements engine.StartKeys.
func (k *StartKeys) ClaimKey(ctx context.Context, key string, e engine.KeyEntry, ttl time.Duration) (engine.KeyEntry, uint64, bool, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return engine.KeyEntry{}, 0, false, err
	}
	for range 8 {
		rev, err := k.kv.Create(ctx, key, b, keyTTL(ttl)...)
		if err == nil {
			return e, rev, true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return engine.KeyEntry{}, 0, false, fmt.Errorf("creating start key %s: %w", key, err)
		}
		cur, err := k.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted or expired meanwhile: create again
		}
		if err != nil {
			return engine.KeyEntry{}, 0, false, fmt.Errorf("reading start key %s: %w", key, err)
		}
		var got engine.KeyEntry
		if err := json.Unmarshal(cur.Value(), &got); err != nil || got.RunID == "" {
			return engine.KeyEntry{}, 0, false, fmt.Errorf("%w: start key %s holds %q; delete it with `nats kv del %s %s`",
				ErrMalformedStartKey, key, cur.Value(), streams.StartKeysBucket, key)
		}
		return got, cur.Revision(), false, nil
	}
	return engine.KeyEntry{}, 0, false, fmt.Errorf("start key %s keeps changing; retry", key)
}

// ReplaceKey implements engine.StartKeys: the entry is deleted at revision rev, and e created
// in its place (an update cannot set a TTL). A crash between the two leaves the key free, which
// the next start claims.
func (k *StartKeys) ReplaceKey(ctx context.Context, key string, rev uint64, e engine.KeyEntry, ttl time.Duration) (uint64, bool, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return 0, false, err
	}
	if err := k.kv.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
		if isRevisionMismatch(err) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("replacing start key %s: %w", key, err)
	}
	rev, err = k.kv.Create(ctx, key, b, keyTTL(ttl)...)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, false, nil // another start claimed the freed key
		}
		return 0, false, fmt.Errorf("replacing start key %s: %w", key, err)
	}
	return rev, true, nil
}

// ReleaseKey implements engine.StartKeys.
func (k *StartKeys) ReleaseKey(ctx context.Context, key, runID string) error {
	cur, err := k.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading start key %s: %w", key, err)
	}
	var got engine.KeyEntry
	if json.Unmarshal(cur.Value(), &got) != nil || got.RunID != runID {
		return nil
	}
	err = k.kv.Delete(ctx, key, jetstream.LastRevision(cur.Revision()))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && !isRevisionMismatch(err) {
		return fmt.Errorf("releasing start key %s: %w", key, err)
	}
	return nil
}

// isRevisionMismatch reports the error of a write at a revision that is not the key's last.
func isRevisionMismatch(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// StoredKey is a start key entry as the bucket holds it.
type StoredKey struct {
	Key      string
	Entry    engine.KeyEntry
	Revision uint64
	// Created is when the server stored this revision.
	Created time.Time
	// Malformed is set for a value that is not a start key entry; Entry is then zero.
	Malformed bool
}

// List returns every entry of the bucket, read with one watch of its latest values.
func (k *StartKeys) List(ctx context.Context) ([]StoredKey, error) {
	w, err := k.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("listing the start keys: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []StoredKey
	for {
		select {
		case u := <-w.Updates():
			if u == nil {
				return out, nil // every entry that existed when the watch began
			}
			sk := StoredKey{Key: u.Key(), Revision: u.Revision(), Created: u.Created()}
			if json.Unmarshal(u.Value(), &sk.Entry) != nil || sk.Entry.RunID == "" {
				sk.Entry, sk.Malformed = engine.KeyEntry{}, true
			}
			out = append(out, sk)
		case <-ctx.Done():
			return nil, fmt.Errorf("listing the start keys: %w", ctx.Err())
		}
	}
}

// DeleteAt deletes key's entry if it is still at revision rev, and reports whether it did.
func (k *StartKeys) DeleteAt(ctx context.Context, key string, rev uint64) (bool, error) {
	err := k.kv.Delete(ctx, key, jetstream.LastRevision(rev))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyNotFound) || isRevisionMismatch(err):
		return false, nil
	}
	return false, fmt.Errorf("deleting start key %s: %w", key, err)
}
