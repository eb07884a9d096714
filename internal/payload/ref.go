// Package payload offloads large JSON payloads from a run's history to a content-addressed
// store, and recognises the references the history then holds (docs/large-payloads.md).
//
// A payload over the threshold is written to the store under its SHA-256, and the event that
// carries it holds a reference in its place:
//
//	{"$flow.payload":"sha256:<64 lowercase hex digits>","size":<bytes>}
//
// A JSON value is a reference exactly when it is an object whose first key is "$flow.payload"
// and that parses as above. User data can never be mistaken for one: a value that begins with
// that key is always offloaded, whatever its size, so that inline it only ever appears as a
// reference. The referenced bytes are the payload exactly as the event would have held it
// (compact JSON), so its hash is a function of the value the code produced, and a replay
// compares a new value with a recorded reference by hashing it, never by downloading it.
//
// This file and offload.go are pure (no I/O but through the Putter given); the JetStream
// Object Store is package objstore.
package payload

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
)

// Key is the key that marks a reference.
const Key = "$flow.payload"

// prefix is how every reference's encoding begins.
var prefix = []byte(`{"` + Key + `":`)

// DefaultThreshold is the payload size above which payloads are offloaded, in bytes: 256 KiB,
// well below NATS's default max_payload of 1 MiB, so that a commit of a few events fits.
const DefaultThreshold = 256 << 10

// Ref is a content-addressed reference to an offloaded payload.
type Ref struct {
	// SHA256 is the payload's SHA-256, 64 lowercase hex digits.
	SHA256 string
	// Size is the payload's length in bytes.
	Size int64
}

// RefOf returns the reference of data.
func RefOf(data []byte) Ref {
	sum := sha256.Sum256(data)
	return Ref{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// JSON returns the reference's encoding, as the history holds it.
func (r Ref) JSON() json.RawMessage {
	b := make([]byte, 0, len(prefix)+80)
	b = append(b, prefix...)
	b = append(b, `"sha256:`...)
	b = append(b, r.SHA256...)
	b = append(b, `","size":`...)
	b = strconv.AppendInt(b, r.Size, 10)
	b = append(b, '}')
	return b
}

// String returns "sha256:<hex> (<size> bytes)".
func (r Ref) String() string { return fmt.Sprintf("sha256:%s (%d bytes)", r.SHA256, r.Size) }

// Name is the object's name in the store: the hex digest.
func (r Ref) Name() string { return r.SHA256 }

// Matches reports whether data is the payload r refers to, by its length and hash.
func (r Ref) Matches(data []byte) bool {
	return int64(len(data)) == r.Size && RefOf(data).SHA256 == r.SHA256
}

// Marked reports whether raw begins like a reference: an object whose first key is Key. Such a
// value is either a reference or user data that must be offloaded to stay unambiguous.
func Marked(raw []byte) bool {
	if bytes.HasPrefix(raw, prefix) {
		return true // the form Flow writes
	}
	rest, ok := bytes.CutPrefix(bytes.TrimLeft(raw, wsp), []byte("{"))
	if !ok {
		return false
	}
	rest, ok = bytes.CutPrefix(bytes.TrimLeft(rest, wsp), []byte(`"`+Key+`"`))
	return ok && bytes.HasPrefix(bytes.TrimLeft(rest, wsp), []byte(":"))
}

// wsp is JSON's whitespace.
const wsp = " \t\r\n"

// Parse returns the reference raw encodes, and whether it is one.
func Parse(raw []byte) (Ref, bool) {
	if !Marked(raw) || len(raw) > 256 {
		return Ref{}, false
	}
	var w struct {
		Hash string `json:"$flow.payload"`
		Size *int64 `json:"size"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil || w.Size == nil || *w.Size < 0 {
		return Ref{}, false
	}
	hexs, ok := bytes.CutPrefix([]byte(w.Hash), []byte("sha256:"))
	if !ok || len(hexs) != 64 {
		return Ref{}, false
	}
	for _, c := range hexs {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return Ref{}, false
		}
	}
	return Ref{SHA256: string(hexs), Size: *w.Size}, true
}

// IsRef reports whether raw is a reference.
func IsRef(raw []byte) bool {
	_, ok := Parse(raw)
	return ok
}

// Equal compares a recorded value with a new one where either may be a reference: two
// references by hash and size, a reference and inline bytes by hashing the bytes. It reports
// handled false when neither is a reference: the caller compares them as JSON.
func Equal(recorded, got []byte) (equal, handled bool) {
	rr, rok := Parse(recorded)
	gr, gok := Parse(got)
	switch {
	case rok && gok:
		return rr == gr, true
	case rok:
		return rr.Matches(got), true
	case gok:
		return gr.Matches(recorded), true
	}
	return false, false
}

// Describe returns raw itself when it is small, and the reference it would be offloaded as
// (or is) otherwise: what an error message or a listing shows of a payload.
func Describe(raw []byte, threshold int) json.RawMessage {
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	if len(raw) <= threshold || IsRef(raw) {
		return raw
	}
	return RefOf(raw).JSON()
}
