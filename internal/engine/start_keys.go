package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/pkg/event"
)

// StartKeys is the durable index of start keys that every engine starting runs shares: a dedup
// key, or a debounce key, names the run started under it. Entries are created only where none is
// (create-only), and replaced only at the revision read, so that of two starts racing for a key
// one wins. On JetStream it is the FLOW_START_KEYS bucket, whose one writer is the history
// service (jshost.StartKeys); the ingress's engine asks it to write (jshost.RemoteStartKeys), and
// a start that cannot ask fails with an error wrapping ErrStartKeysUnavailable.
//
// The entry is written before the run's run.started, and the two writes are not atomic. A start
// that finds an entry naming a run without history (its writer died between the two) starts
// that run itself, under that run ID: the append at sequence 0 lets only one of them create it.
type StartKeys interface {
	// ClaimKey creates key's entry e if key has none, expiring after ttl (0: never), and
	// returns (e, its revision, true). If key has an entry it returns that entry, its revision
	// and false.
	ClaimKey(ctx context.Context, key string, e KeyEntry, ttl time.Duration) (KeyEntry, uint64, bool, error)
	// ReplaceKey replaces key's entry at revision rev with e, expiring after ttl (0: never),
	// and returns the new entry's revision and true. It returns false, and writes nothing, if
	// the entry changed since rev.
	ReplaceKey(ctx context.Context, key string, rev uint64, e KeyEntry, ttl time.Duration) (uint64, bool, error)
	// ReleaseKey deletes key's entry if it still names run runID; otherwise it does nothing.
	ReleaseKey(ctx context.Context, key, runID string) error
}

// ErrStartKeysUnavailable is wrapped by the error of a start key operation that could not be
// made because the index's writer did not answer (no history service runs, or it was too slow).
// The start may be retried as it was: a claim whose answer was lost left at most an entry naming
// a run without history, which the retry starts (see StartKeys).
var ErrStartKeysUnavailable = errors.New("flow: the start key index is unavailable")

// KeyEntry is one entry of the start key index (core.KeyEntry, which the wire types carry).
type KeyEntry = core.KeyEntry

// DedupIndexKey and DebounceIndexKey name a key's entry in the index: per definition, the
// caller's key as a SHA-256 digest (keys may hold any text; index keys may not).
func DedupIndexKey(definition, key string) string { return "dedup." + definition + "." + digest(key) }
func DebounceIndexKey(definition, key string) string {
	return "debounce." + definition + "." + digest(key)
}

func digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// startDedup starts the run p describes unless a start with the same dedup key started one
// within the key's window: that run is returned then, whatever run ID p asks for.
func (e *Engine) startDedup(ctx context.Context, p StartParams, started *event.RunStarted) (string, bool, error) {
	key := DedupIndexKey(p.Spec.Definition, p.DedupKey)
	for range maxPolicyRounds {
		now := e.clock.Now().UTC()
		want := KeyEntry{RunID: p.RunID, Key: p.DedupKey, Until: now.Add(p.DedupWindow)}
		cur, rev, claimed, err := e.keys.ClaimKey(ctx, key, want, p.DedupWindow)
		if err != nil {
			return "", false, fmt.Errorf("claiming dedup key %q: %w", p.DedupKey, err)
		}
		if !claimed && now.Before(cur.Until) {
			return e.startClaimed(ctx, p, started, cur.RunID)
		}
		if !claimed {
			// The window ended; the entry had not expired yet.
			if rev, claimed, err = e.keys.ReplaceKey(ctx, key, rev, want, p.DedupWindow); err != nil {
				return "", false, fmt.Errorf("claiming dedup key %q: %w", p.DedupKey, err)
			}
			if !claimed {
				continue
			}
		}
		return e.startKeyed(ctx, p, started, keyClaim{key: key, rev: rev, entry: want, ttl: p.DedupWindow, what: "dedup key " + strconv.Quote(p.DedupKey),
			same: func(sp *event.StartPolicy) bool { return sp.DedupKey == p.DedupKey }})
	}
	return "", false, fmt.Errorf("starting under dedup key %q: other starts of the key kept winning; retry", p.DedupKey)
}

// keyClaim is a start key entry a start created (or replaced) at revision rev.
type keyClaim struct {
	key   string
	rev   uint64
	entry KeyEntry
	ttl   time.Duration
	what  string
	// same reports whether a run's start policy was started under this key.
	same func(*event.StartPolicy) bool
	// join, when set, adds the start to the key's run that another start started (debounce).
	join func(runID string) error
}

// startKeyed starts the run p describes, for the key it claimed. Until run.started is appended
// another start of the key cannot tell this start from one that died, and may start p.RunID
// itself (startClaimed): that run is then the key's, and returned. A run ID taken by another
// run gets p's conflict or reuse policy; the key then names the run that took the start (a
// reuse run), or, if the start was refused, is released.
func (e *Engine) startKeyed(ctx context.Context, p StartParams, started *event.RunStarted, c keyClaim) (string, bool, error) {
	if err := e.faults.Hit(fault.AfterKeyBeforeStart); err != nil {
		return "", false, fmt.Errorf("starting run %q under %s: %w", p.RunID, c.what, err)
	}
	err := e.appendStart(ctx, p.RunID, &p, started)
	if err == nil {
		return p.RunID, true, nil
	}
	if !errors.Is(err, store.ErrConflict) {
		return "", false, fmt.Errorf("appending run.started: %w", err)
	}
	got, err := e.started(ctx, p.RunID)
	if err != nil {
		return "", false, err
	}
	if got != nil && got.StartPolicy != nil && c.same(got.StartPolicy) {
		// Started for the key by another start.
		if c.join != nil {
			if err := c.join(p.RunID); err != nil && !errors.Is(err, core.ErrStale) && !errors.Is(err, core.ErrTerminal) {
				return "", false, err
			}
		}
		return p.RunID, false, nil
	}
	id, created, err := e.onTaken(ctx, p, started)
	switch {
	case err != nil:
		if rerr := e.keys.ReleaseKey(ctx, c.key, p.RunID); rerr != nil {
			e.logger.WarnContext(ctx, "a refused start's key was not released", slog.String("key", c.key), slog.String("error", rerr.Error()))
		}
	case id != p.RunID:
		c.entry.RunID = id
		if _, _, rerr := e.keys.ReplaceKey(ctx, c.key, c.rev, c.entry, c.ttl); rerr != nil {
			e.logger.WarnContext(ctx, "a start key does not name the run that took its start", slog.String("key", c.key),
				slog.String("run_id", id), slog.String("error", rerr.Error()))
		}
	}
	return id, created, err
}

// startClaimed returns run runID, which a key names, starting it as p describes if it has no
// history: its starter died between claiming the key and appending run.started.
func (e *Engine) startClaimed(ctx context.Context, p StartParams, started *event.RunStarted, runID string) (string, bool, error) {
	ok, err := e.exists(ctx, runID)
	if err != nil || ok {
		return runID, false, err
	}
	p.RunID = runID
	err = e.appendStart(ctx, runID, &p, started)
	switch {
	case err == nil:
		e.logger.InfoContext(ctx, "started the run a start key named, whose starter did not", slog.String("run_id", runID))
		return runID, true, nil
	case errors.Is(err, store.ErrConflict):
		return runID, false, nil
	}
	return "", false, fmt.Errorf("appending run.started: %w", err)
}

// startDebounced collapses the start p describes into the pending run of its debounce key, or,
// if the key has none that is still delayed, starts a new delayed run under the key.
func (e *Engine) startDebounced(ctx context.Context, p StartParams, started *event.RunStarted) (string, bool, error) {
	key := DebounceIndexKey(p.Spec.Definition, p.Debounce.Key)
	want := KeyEntry{RunID: p.RunID, Key: p.Debounce.Key}
	for range maxPolicyRounds {
		cur, rev, claimed, err := e.keys.ClaimKey(ctx, key, want, 0)
		if err != nil {
			return "", false, fmt.Errorf("claiming debounce key %q: %w", p.Debounce.Key, err)
		}
		if !claimed {
			err := e.debounceInto(ctx, cur.RunID, p.Debounce.Period, started)
			switch {
			case err == nil:
				return cur.RunID, false, nil
			case errors.Is(err, core.ErrNotFound):
				// The key's starter died before run.started: start the run it named.
				id, created, err := e.startClaimed(ctx, p, started, cur.RunID)
				if err != nil || created {
					return id, created, err
				}
				continue // started meanwhile by another start: collapse into it
			case !errors.Is(err, core.ErrStale) && !errors.Is(err, core.ErrTerminal):
				return "", false, err
			}
			// The run's quiet period is over: the key names a new run.
			if rev, claimed, err = e.keys.ReplaceKey(ctx, key, rev, want, 0); err != nil {
				return "", false, fmt.Errorf("claiming debounce key %q: %w", p.Debounce.Key, err)
			}
			if !claimed {
				continue
			}
		}
		return e.startKeyed(ctx, p, started, keyClaim{key: key, rev: rev, entry: want, what: "debounce key " + strconv.Quote(p.Debounce.Key),
			same: func(sp *event.StartPolicy) bool { return sp.Debounce != nil && sp.Debounce.Key == p.Debounce.Key },
			join: func(runID string) error { return e.debounceInto(ctx, runID, p.Debounce.Period, started) }})
	}
	return "", false, fmt.Errorf("starting under debounce key %q: other starts of the key kept winning; retry", p.Debounce.Key)
}

// debounceInto appends run.debounced to delayed run runID: started's input, and the quiet
// period's end from now. It registers the new start timer and deletes the old one as a fast
// path (the history service registers the new one; the old one, found stale when it fires, is
// deleted by the scheduler). ErrStale when the run is past its delay.
func (e *Engine) debounceInto(ctx context.Context, runID string, period time.Duration, started *event.RunStarted) error {
	// The new start timer follows from the commit (the history service registers it, the
	// scheduler learns of it from the commit as it is published); the one it replaces is moot.
	return e.external(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		if s.Spec.Definition != started.Spec.Definition {
			return nil, fmt.Errorf("engine bug: debounce key of definition %q names run %q of definition %q", started.Spec.Definition, runID, s.Spec.Definition)
		}
		return core.Debounce(s, started.Input, e.now(s).Add(period), tracing.TraceParent(ctx))
	})
}

// releaseDebounce frees the debounce key of run s, whose delay fired or which ended delayed, so
// that the next start of the key starts a new run. An entry naming another run is left alone;
// one left behind is replaced by the next start.
func (e *Engine) releaseDebounce(ctx context.Context, s *core.Snapshot) error {
	d := s.StartPolicy.Debounce
	if d == nil || e.keys == nil {
		return nil
	}
	if err := e.keys.ReleaseKey(ctx, DebounceIndexKey(s.Spec.Definition, d.Key), s.RunID); err != nil {
		return fmt.Errorf("releasing debounce key %q of run %q: %w", d.Key, s.RunID, err)
	}
	return nil
}

// MemoryKeys is an in-memory StartKeys for tests and single-process use. Expiry follows the
// engine's clock only as far as callers pass ttl; entries with a ttl expire at the system time.
type MemoryKeys struct {
	mu      sync.Mutex
	rev     uint64
	entries map[string]memoryKey
	// Now tells the time for expiry. Defaults to time.Now.
	Now func() time.Time
}

type memoryKey struct {
	e       KeyEntry
	rev     uint64
	expires time.Time
}

var _ StartKeys = (*MemoryKeys)(nil)

func (m *MemoryKeys) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

func (m *MemoryKeys) live(key string) (memoryKey, bool) {
	k, ok := m.entries[key]
	if ok && !k.expires.IsZero() && !m.now().Before(k.expires) {
		delete(m.entries, key)
		return memoryKey{}, false
	}
	return k, ok
}

func (m *MemoryKeys) put(key string, e KeyEntry, ttl time.Duration) uint64 {
	if m.entries == nil {
		m.entries = map[string]memoryKey{}
	}
	m.rev++
	k := memoryKey{e: e, rev: m.rev}
	if ttl > 0 {
		k.expires = m.now().Add(ttl)
	}
	m.entries[key] = k
	return m.rev
}

// ClaimKey implements StartKeys.
func (m *MemoryKeys) ClaimKey(_ context.Context, key string, e KeyEntry, ttl time.Duration) (KeyEntry, uint64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.live(key); ok {
		return k.e, k.rev, false, nil
	}
	return e, m.put(key, e, ttl), true, nil
}

// ReplaceKey implements StartKeys.
func (m *MemoryKeys) ReplaceKey(_ context.Context, key string, rev uint64, e KeyEntry, ttl time.Duration) (uint64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.live(key); !ok || k.rev != rev {
		return 0, false, nil
	}
	return m.put(key, e, ttl), true, nil
}

// ReleaseKey implements StartKeys.
func (m *MemoryKeys) ReleaseKey(_ context.Context, key, runID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.live(key); ok && k.e.RunID == runID {
		delete(m.entries, key)
	}
	return nil
}

// Len returns the number of live entries.
func (m *MemoryKeys) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for key := range m.entries {
		if _, ok := m.live(key); ok {
			n++
		}
	}
	return n
}
