package flow

import (
	"context"
	"fmt"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
)

// A run's secrets are its seed, from which its hook tokens derive, and its hook tokens: a hook
// token lets anyone who holds it deliver to the hook. Snapshot, Describe, History and Watch
// serve them redacted (as "redacted", and a hook's token as "redacted:<hook id>"). A program
// that needs a hook's token gets it from the workflow that created the hook, or asks for it
// with [SecretClient.Snapshot], which NATS permissions grant only to operators:
// deploy/nats/auth.conf gives it to no role (docs/operations.md#secrets).

// SecretClient reads runs with their secrets, over the history service's secrets endpoints,
// which NATS permissions grant only to operators. Get one with [Client.Secrets]; it shares the
// client's connection and is safe for concurrent use.
type SecretClient struct{ c *Client }

// Secrets returns the client's operator reads of runs' secrets.
func (c *Client) Secrets() SecretClient { return SecretClient{c: c} }

// Snapshot returns run runID's latest snapshot with its hook tokens, over the history service's
// secrets endpoint (api.SubjectSecretsGet). A connection not permitted to publish there gets an
// error (a permissions violation, or no answer). Errors are otherwise [Client.Snapshot]'s.
func (s SecretClient) Snapshot(ctx context.Context, runID string) (*Snapshot, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	c := s.c
	var resp RunDescription
	if err := c.query(ctx, api.SubjectSecretsGet, api.GetRequest{RunID: runID, AtLeast: c.seen.get(runID)}, &resp); err != nil {
		return nil, err
	}
	c.seen.note(runID, resp.Last)
	if resp.Damage != nil {
		return nil, fmt.Errorf("%w: the history of run %q is damaged (%s)", ErrDamaged, runID, resp.Damage.Reason)
	}
	return resp.Snapshot, nil
}

// History is [Client.History] with the run's seed and hook tokens, over the history service's
// secrets endpoint (api.SubjectSecretsHistory), with Snapshot's permissions.
func (s SecretClient) History(ctx context.Context, runID string, after uint64) ([]event.Envelope, error) {
	return s.c.history(ctx, api.SubjectSecretsHistory, runID, after)
}

// HookToken returns the token of hook hookID of run runID, as Snapshot reads it. A run without
// that hook is an error wrapping ErrNotFound.
func (s SecretClient) HookToken(ctx context.Context, runID, hookID string) (string, error) {
	snap, err := s.Snapshot(ctx, runID)
	if err != nil {
		return "", err
	}
	h, ok := snap.Hooks[hookID]
	if !ok {
		return "", &notFoundHook{runID: runID, hookID: hookID}
	}
	return h.Token, nil
}

type notFoundHook struct{ runID, hookID string }

func (e *notFoundHook) Error() string {
	return "flow: run " + e.runID + " has no hook " + e.hookID + " (yet)"
}

func (e *notFoundHook) Unwrap() error { return ErrNotFound }
