package api

import (
	"time"

	"github.com/flowrun/flow/internal/core"
)

// The start key index (FLOW_START_KEYS, docs/start-policies.md) has one writer, the history
// service. An engine that starts runs with a dedup key or a debounce (the ingress's) asks it to
// claim, replace or release a key over NATS request/reply (engine.StartKeys; the requester is
// jshost.RemoteStartKeys), and the history service makes the same create-only and
// compare-and-set writes it would have made. Every replica of the history service answers (a
// micro service endpoint, queue group "q"); with none running a request gets no responders.
//
//	flow.derived.startkeys.claim    StartKeyRequest{Key, Entry, TTL}            -> StartKeyResponse{Entry, Revision, Done: created}
//	flow.derived.startkeys.replace  StartKeyRequest{Key, Revision, Entry, TTL}  -> StartKeyResponse{Revision, Done: replaced}
//	flow.derived.startkeys.release  StartKeyRequest{Key, Entry: {RunID}}         -> StartKeyResponse{}
//
// Like the other doors of derived state (derived.go), they are not under flow.api.>, which
// clients may publish to: only the ingress asks them.
//
// An error is a reply with an empty body and micro's error headers (Code as in api.Error):
// CodeInvalid for a request that is not one, CodeUnavailable when the bucket could not be
// written (retry), CodeInternal for an entry that is not one (an operator deletes it).
const (
	SubjectStartKeysPrefix = DerivedPrefix + "startkeys."
	SubjectStartKeyClaim   = SubjectStartKeysPrefix + "claim"
	SubjectStartKeyReplace = SubjectStartKeysPrefix + "replace"
	SubjectStartKeyRelease = SubjectStartKeysPrefix + "release"
)

// StartKeyRequest asks the history service to claim, replace or release start key Key (an
// index key: engine.DedupIndexKey or engine.DebounceIndexKey).
type StartKeyRequest struct {
	Key string `json:"key"`
	// Entry is the entry to create (claim, replace); for a release, the run whose entry it is.
	Entry core.KeyEntry `json:"entry"`
	// TTL is how long a created entry lives; 0: until it is released or replaced.
	TTL time.Duration `json:"ttl,omitempty"`
	// Revision is the revision of the entry a replace replaces.
	Revision uint64 `json:"revision,omitempty"`
}

// StartKeyResponse is the history service's answer: for a claim, the key's entry (the one asked
// for when Done, else the one the key holds) and its revision; for a replace, the new entry's
// revision when Done (false: the entry changed since the revision read, and nothing was written).
type StartKeyResponse struct {
	Entry    core.KeyEntry `json:"entry"`
	Revision uint64        `json:"revision,omitempty"`
	Done     bool          `json:"done"`
}
