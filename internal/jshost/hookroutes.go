package jshost

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/typedkv"
)

// HookRoute is a FLOW_HOOKS entry, keyed by the token. Released is set once the run ended: the
// token still routes there, so that a late redelivery is answered as the duplicate it is, until
// another run's hook takes the token over.
type HookRoute struct {
	RunID    string `json:"run_id"`
	HookID   string `json:"hook_id"`
	Released bool   `json:"released,omitempty"`
}

// HookRouteEntry is a FLOW_HOOKS entry as read; its Key is the hook token.
type HookRouteEntry = typedkv.Entry[HookRoute]

// HookRoutes is the FLOW_HOOKS repository: hook tokens to the run and hook they route to. The
// history service is its one writer (through its Host, and its reconciler and retention sweeper);
// other processes look tokens up, and workers ask the history service to claim them. Every
// write is a create or a compare-and-set on the entry's revision. It is safe for concurrent use.
type HookRoutes struct {
	b *typedkv.Bucket[HookRoute]
}

// OpenHookRoutes opens FLOW_HOOKS on js.
func OpenHookRoutes(ctx context.Context, js jetstream.JetStream) (*HookRoutes, error) {
	b, err := typedkv.Open[HookRoute](ctx, js, streams.HooksBucket)
	if err != nil {
		return nil, err
	}
	return &HookRoutes{b: b}, nil
}

// Get returns the route of token; found is false when there is none. A token that cannot be a
// key (no route can have it) is an error wrapping jetstream.ErrInvalidKey. A route whose value
// does not decode is returned with Err set.
func (h *HookRoutes) Get(ctx context.Context, token string) (e HookRouteEntry, found bool, err error) {
	return h.b.Get(ctx, token)
}

// Create writes route r of token if token has none, and returns its revision; otherwise an
// error wrapping jetstream.ErrKeyExists.
func (h *HookRoutes) Create(ctx context.Context, token string, r HookRoute) (uint64, error) {
	return h.b.Create(ctx, token, r)
}

// Update writes route r of token if its entry is at revision rev, and returns the new revision;
// otherwise an error wrapping jetstream.ErrKeyRevisionMismatch (or ErrKeyExists).
func (h *HookRoutes) Update(ctx context.Context, token string, r HookRoute, rev uint64) (uint64, error) {
	return h.b.Update(ctx, token, r, rev)
}

// Delete deletes the route of token if its entry is at revision rev; otherwise an error
// wrapping jetstream.ErrKeyRevisionMismatch (or ErrKeyExists).
func (h *HookRoutes) Delete(ctx context.Context, token string, rev uint64) error {
	return h.b.Delete(ctx, token, rev)
}

// DeleteIfRoutes deletes the route of token if it routes to run runID, at the revision it read:
// a token another run took over since is left alone.
func (h *HookRoutes) DeleteIfRoutes(ctx context.Context, token, runID string) error {
	e, found, err := h.Get(ctx, token)
	if errors.Is(err, jetstream.ErrInvalidKey) {
		return nil
	}
	if err != nil || !found || e.Err != nil || e.Value.RunID != runID {
		return err
	}
	err = h.b.Delete(ctx, token, e.Revision)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	return nil
}

// List returns the routes, read by one watch.
func (h *HookRoutes) List(ctx context.Context) ([]HookRouteEntry, error) { return h.b.List(ctx) }
