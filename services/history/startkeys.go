package history

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/pkg/event"
)

// The history service is the one writer of the start key index, FLOW_START_KEYS
// (docs/start-policies.md): it claims and replaces keys for the engines that start runs, which
// ask it over request/reply (api.SubjectStartKeyClaim and the others, served by every replica),
// releases the debounce key of a run whose delay fired or that ended delayed (a consequence of
// the commit, engine.ApplyCommit), releases a deleted run's keys (retention), and repairs the
// index (reconcileStartKeys). It holds the reset locks too (engine.ResetLockKey): short-lived
// entries that serialize the resets of one workflow's runs, which expire with their TTL. Every write is create-only or at the revision read, so replicas
// answering requests at once agree as a single writer would.

// claimStartKey answers api.SubjectStartKeyClaim: engine.StartKeys.ClaimKey on the bucket.
func (s *Service) claimStartKey(ctx context.Context, req api.StartKeyRequest) (*api.StartKeyResponse, error) {
	if err := checkStartKeyRequest(req, true); err != nil {
		return nil, err
	}
	e, rev, created, err := s.keys.ClaimKey(ctx, req.Key, req.Entry, req.TTL)
	if err != nil {
		return nil, startKeyError(err)
	}
	return &api.StartKeyResponse{Entry: e, Revision: rev, Done: created}, nil
}

// replaceStartKey answers api.SubjectStartKeyReplace: engine.StartKeys.ReplaceKey on the bucket.
func (s *Service) replaceStartKey(ctx context.Context, req api.StartKeyRequest) (*api.StartKeyResponse, error) {
	if err := checkStartKeyRequest(req, true); err != nil {
		return nil, err
	}
	if req.Revision == 0 {
		return nil, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("replacing start key %s needs the revision of the entry it replaces", req.Key)}
	}
	rev, replaced, err := s.keys.ReplaceKey(ctx, req.Key, req.Revision, req.Entry, req.TTL)
	if err != nil {
		return nil, startKeyError(err)
	}
	return &api.StartKeyResponse{Entry: req.Entry, Revision: rev, Done: replaced}, nil
}

// releaseStartKey answers api.SubjectStartKeyRelease: engine.StartKeys.ReleaseKey on the bucket.
func (s *Service) releaseStartKey(ctx context.Context, req api.StartKeyRequest) (*api.StartKeyResponse, error) {
	if err := checkStartKeyRequest(req, false); err != nil {
		return nil, err
	}
	if err := s.keys.ReleaseKey(ctx, req.Key, req.Entry.RunID); err != nil {
		return nil, startKeyError(err)
	}
	return &api.StartKeyResponse{}, nil
}

// checkStartKeyRequest refuses a request that names no start key or no run; entry says whether
// it creates an entry (claim, replace), which must then be whole.
func checkStartKeyRequest(req api.StartKeyRequest, entry bool) error {
	bad := func(format string, args ...any) error {
		return &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf(format, args...)}
	}
	if !strings.HasPrefix(req.Key, "dedup.") && !strings.HasPrefix(req.Key, "debounce.") && !strings.HasPrefix(req.Key, "reset.") {
		return bad("%q is not a start key: it is engine.DedupIndexKey's, engine.DebounceIndexKey's or engine.ResetLockKey's", req.Key)
	}
	if err := event.ValidateDerivedRunID(req.Entry.RunID); err != nil {
		return bad("start key %s: the entry's run: %v", req.Key, err)
	}
	if entry && req.TTL < 0 {
		return bad("start key %s: the TTL %s is negative", req.Key, req.TTL)
	}
	if entry && strings.HasPrefix(req.Key, "reset.") && (req.TTL <= 0 || req.TTL > engine.ResetLockTTL) {
		return bad("reset lock %s: the TTL %s is not in (0, %s]: a lock whose holder dies must expire", req.Key, req.TTL, engine.ResetLockTTL)
	}
	return nil
}

// startKeyError is the answer to a start key operation that failed: a key the bucket refuses is
// the request's fault, a malformed entry an operator's to delete, anything else the bucket's
// and retried.
func startKeyError(err error) error {
	switch {
	case errors.Is(err, jetstream.ErrInvalidKey):
		return &api.Error{Code: api.CodeInvalid, Message: err.Error()}
	case errors.Is(err, jshost.ErrMalformedStartKey):
		return &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	return &api.Error{Code: api.CodeUnavailable, Message: err.Error() + "; retry"}
}
