package jshost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/engine"
)

// RemoteStartKeys implements engine.StartKeys by asking the history service, the one writer of
// FLOW_START_KEYS, over NATS request/reply (api.SubjectStartKeyClaim and the others): it writes
// nothing itself. Its answers are the history service's jshost.StartKeys's. It is safe for
// concurrent use.
//
// With no history service answering, or one that does not answer within RemoteKeysTimeout, an
// operation fails with an error wrapping engine.ErrStartKeysUnavailable.
type RemoteStartKeys struct {
	nc *nats.Conn
}

var _ engine.StartKeys = (*RemoteStartKeys)(nil)

// RemoteKeysTimeout bounds the wait for the history service's answer to one operation.
const RemoteKeysTimeout = 5 * time.Second

// NewRemoteStartKeys returns the start key index of the history service reached over nc.
func NewRemoteStartKeys(nc *nats.Conn) *RemoteStartKeys { return &RemoteStartKeys{nc: nc} }

// ClaimKey implements engine.StartKeys.
func (k *RemoteStartKeys) ClaimKey(ctx context.Context, key string, e engine.KeyEntry, ttl time.Duration) (engine.KeyEntry, uint64, bool, error) {
	resp, err := k.ask(ctx, api.SubjectStartKeyClaim, api.StartKeyRequest{Key: key, Entry: e, TTL: ttl})
	if err != nil {
		return engine.KeyEntry{}, 0, false, err
	}
	return resp.Entry, resp.Revision, resp.Done, nil
}

// ReplaceKey implements engine.StartKeys.
func (k *RemoteStartKeys) ReplaceKey(ctx context.Context, key string, rev uint64, e engine.KeyEntry, ttl time.Duration) (uint64, bool, error) {
	resp, err := k.ask(ctx, api.SubjectStartKeyReplace, api.StartKeyRequest{Key: key, Revision: rev, Entry: e, TTL: ttl})
	if err != nil {
		return 0, false, err
	}
	return resp.Revision, resp.Done, nil
}

// ReleaseKey implements engine.StartKeys.
func (k *RemoteStartKeys) ReleaseKey(ctx context.Context, key, runID string) error {
	_, err := k.ask(ctx, api.SubjectStartKeyRelease, api.StartKeyRequest{Key: key, Entry: engine.KeyEntry{RunID: runID}})
	return err
}

// ask sends req on subject and returns the history service's answer. Its errors name the
// subject, not the key: the engine's errors name the caller's key.
func (k *RemoteStartKeys) ask(ctx context.Context, subject string, req api.StartKeyRequest) (*api.StartKeyResponse, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, RemoteKeysTimeout)
	defer cancel()
	m, err := k.nc.RequestMsgWithContext(rctx, &nats.Msg{Subject: subject, Data: data})
	if err != nil {
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return nil, fmt.Errorf("%w: no history service answers on %s, and it alone writes start keys; "+
				"start `flowd history` (or `flow dev`), then retry", engine.ErrStartKeysUnavailable, subject)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("asking the history service on %s: %w", subject, ctx.Err())
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
			return nil, fmt.Errorf("%w: the history service did not answer on %s within %s; retry", engine.ErrStartKeysUnavailable, subject, RemoteKeysTimeout)
		}
		return nil, fmt.Errorf("%w: asking the history service on %s: %v; retry", engine.ErrStartKeysUnavailable, subject, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		msg := m.Header.Get(micro.ErrorHeader)
		if api.Code(code) == api.CodeUnavailable {
			return nil, fmt.Errorf("%w: the history service: %s", engine.ErrStartKeysUnavailable, msg)
		}
		return nil, fmt.Errorf("the history service refused (%s): %s", code, msg)
	}
	var resp api.StartKeyResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("the history service answered on %s with something that is not a start key answer: %w", subject, err)
	}
	return &resp, nil
}
