// Package inputsig signs and verifies the input events of run histories: the signals, hook
// deliveries, updates, cancellation requests, pauses and unpauses that come from outside a run
// (docs/operations.md#input-signatures).
//
// NATS permissions cannot tell the writers of one subject apart, and every process that hosts
// the engine (history service, scheduler, ingress, workers) may publish to flow.history.>. So the
// input writers, the processes that take inputs from callers (the ingress, the scheduler's batch
// jobs, schedules and admission, the history service), sign each commit that holds input events
// with an HMAC-SHA256 key that only they can read: key "inputs" of bucket FLOW_SECRETS, which the
// worker and client roles are not granted. The signature travels in the commit message's
// Flow-Input-Signature header and covers the run ID and, for each input event of the commit, its
// sequence, its type and its payload's JSON as stored: it cannot be moved to another run or to
// another position, and the optimistic concurrency of appends never lets a sequence be written
// twice. A reader holding the key refuses a commit whose input events are not signed as the
// damage of the run's history (jsstore).
//
// Commits written before the key existed carry no signature: the key records each history
// stream's last sequence when it was created (Key.EpochOf), and only messages after it must be
// signed.
package inputsig

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/pkg/event"
)

// Header is the history message header that carries a commit's input signature.
const Header = "Flow-Input-Signature"

// KeyName is the key of the signing key in streams.SecretsBucket.
const KeyName = "inputs"

// version prefixes signatures: "v1." then the unpadded base64url HMAC.
const version = "v1."

// ErrUnsigned is wrapped by the errors of Verify for a commit whose input events are not signed
// by an input writer.
var ErrUnsigned = errors.New("not written by an input writer")

// Key is the input signing key. It is safe for concurrent use.
type Key struct {
	secret []byte
	// Epoch is the history stream's (partition 0's) last sequence when the key was created:
	// messages at or before it were written before inputs were signed, and need no signature.
	Epoch uint64
	// Epochs are partitions 1..'s epochs, for a partitioned history (streams.Layout).
	Epochs []uint64
}

// stored is the key's value in streams.SecretsBucket.
type stored struct {
	Secret []byte `json:"secret"`
	Epoch  uint64 `json:"epoch"`
	// Epochs are the epochs of partitions 1.. of a partitioned history (streams.Layout).
	Epochs []uint64 `json:"epochs,omitempty"`
}

// EpochOf returns history partition p's epoch: its stream's last sequence when the key was
// created (0, every message signed, for a partition the key does not know).
func (k *Key) EpochOf(p int) uint64 {
	if p == 0 {
		return k.Epoch
	}
	if p <= len(k.Epochs) {
		return k.Epochs[p-1]
	}
	return 0
}

// NewKey returns a key with secret (at least 32 bytes) and epoch; for tests and tools.
func NewKey(secret []byte, epoch uint64) (*Key, error) {
	if len(secret) < 32 {
		return nil, fmt.Errorf("inputsig: a key needs at least 32 bytes, got %d", len(secret))
	}
	return &Key{secret: append([]byte(nil), secret...), Epoch: epoch}, nil
}

// Load reads the signing key from streams.SecretsBucket, creating it (kv.Create, so that
// concurrent first starts agree on one key) if it does not exist yet. Only the history service,
// the ingress and the scheduler may read the bucket; the history service provisions it
// (streams.Ensure) and creates the key at its first start, before the others need it.
func Load(ctx context.Context, js jetstream.JetStream) (*Key, error) {
	kv, err := js.KeyValue(ctx, streams.SecretsBucket)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s for the input signing key (only the history service, the ingress and the scheduler may read it): %w",
			streams.SecretsBucket, err)
	}
	for range 3 {
		e, err := kv.Get(ctx, KeyName)
		if err == nil {
			return decode(e.Value())
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("reading the input signing key from bucket %s: %w", streams.SecretsBucket, err)
		}
		layout, err := streams.Load(ctx, js)
		if err != nil {
			return nil, err
		}
		v := stored{Secret: make([]byte, 32)}
		for p, name := range layout.Streams() {
			st, err := js.Stream(ctx, name)
			if err != nil {
				return nil, fmt.Errorf("reading stream %s for the input signing key's epoch: %w", name, err)
			}
			if p == 0 {
				v.Epoch = st.CachedInfo().State.LastSeq
			} else {
				v.Epochs = append(v.Epochs, st.CachedInfo().State.LastSeq)
			}
		}
		if _, err := rand.Read(v.Secret); err != nil {
			return nil, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		if _, err := kv.Create(ctx, KeyName, b); err == nil {
			return decode(b)
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("creating the input signing key in bucket %s (start the history service first: it creates it): %w",
				streams.SecretsBucket, err)
		}
	}
	return nil, fmt.Errorf("reading the input signing key from bucket %s: it was created and deleted meanwhile", streams.SecretsBucket)
}

func decode(b []byte) (*Key, error) {
	var v stored
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("decoding the input signing key of bucket %s: %w", streams.SecretsBucket, err)
	}
	k, err := NewKey(v.Secret, v.Epoch)
	if err != nil {
		return nil, err
	}
	k.Epochs = v.Epochs
	return k, nil
}

// IsInput reports whether p is an input event, which only an input writer may append: a signal,
// a hook delivery, an update, a cancellation request (but one a parent run's end or decision
// asked for, which names the parent: workers write those, and core checks that the parent is
// the run's), an operator's pause, an unpause.
func IsInput(p event.Payload) bool {
	switch p := p.(type) {
	case *event.SignalReceived, *event.HookReceived, *event.UpdateReceived, *event.RunUnpaused:
		return true
	case *event.RunCancelRequested:
		return p.Parent == ""
	case *event.RunPaused:
		return p.Cause == event.PauseOperator
	}
	return false
}

// Sign returns the signature of the input events among envs, commit events of run runID whose
// payloads' JSON, as stored, is payloads; "" if there are none.
func (k *Key) Sign(runID string, envs []event.Envelope, payloads []json.RawMessage) string {
	mac, any := k.mac(runID, envs, payloads)
	if !any {
		return ""
	}
	return version + base64.RawURLEncoding.EncodeToString(mac)
}

// Verify checks sig, a commit's Flow-Input-Signature header, against the input events among
// envs (see Sign). It returns nil for a commit without input events, and otherwise an error
// wrapping ErrUnsigned that names the first input event.
func (k *Key) Verify(runID string, envs []event.Envelope, payloads []json.RawMessage, sig string) error {
	want, any := k.mac(runID, envs, payloads)
	if !any {
		return nil
	}
	got, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(sig, version))
	if err == nil && strings.HasPrefix(sig, version) && hmac.Equal(got, want) {
		return nil
	}
	for _, e := range envs {
		if IsInput(e.Payload) {
			why := "its " + Header + " header is missing"
			if sig != "" {
				why = "its " + Header + " header does not match"
			}
			return fmt.Errorf("%w: %s at seq %d of run %q is %w (%s)", event.ErrMalformed, e.Type(), e.Seq, runID, ErrUnsigned, why)
		}
	}
	return nil // unreachable: mac found an input
}

// mac computes the HMAC over runID and each input event's sequence, type and payload; any
// reports whether there was one.
func (k *Key) mac(runID string, envs []event.Envelope, payloads []json.RawMessage) (mac []byte, any bool) {
	h := hmac.New(sha256.New, k.secret)
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte("flow input signature v1"))
	field([]byte(runID))
	for i, e := range envs {
		if !IsInput(e.Payload) {
			continue
		}
		any = true
		field([]byte(strconv.FormatUint(e.Seq, 10)))
		field([]byte(e.Type()))
		if i < len(payloads) {
			field(payloads[i])
		} else {
			field(nil)
		}
	}
	return h.Sum(nil), any
}
