package jshost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/streams"
)

// StartKeys implements engine.StartKeys on the FLOW_START_KEYS bucket: create-only entries
// (KeyValue.Create), replaced and released only at the revision read, with a per-key TTL for
// dedup windows (the bucket keeps limit markers, which per-key TTLs need). It is safe for
// concurrent use, by any number of processes.
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
			return engine.KeyEntry{}, 0, false, fmt.Errorf("start key %s holds a malformed entry (%q); delete it with `nats kv del %s %s`",
				key, cur.Value(), streams.StartKeysBucket, key)
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
