package payload

import (
	"bytes"
	"encoding/json"
	"regexp"

	"github.com/flowrun/flow/pkg/event"
)

// fields calls fn with the address of every payload field of p: the fields Offload may replace
// by a reference, and so the only fields that may hold one (docs/large-payloads.md lists them).
// Each event type declares them next to its payload type (event.Described.PayloadFields), the
// one list that offloading, the archive of a deleted run and the payload collector all read: a
// field declared there is offloaded, archived and kept alive at once.
//
// With clone false, fn sees p's own fields and must not change them. With clone true, fields
// copies p first (event.CopyPayload: the struct, and the slices whose elements hold fields) and
// fn may change the copy's fields; fields returns the copy. It returns nil for a payload that
// has no such field.
func fields(p event.Payload, clone bool, fn func(*json.RawMessage)) event.Payload {
	fs := event.PayloadFields(p)
	if len(fs) == 0 {
		return nil
	}
	if clone {
		p = event.CopyPayload(p)
		fs = event.PayloadFields(p)
	}
	for _, f := range fs {
		fn(f)
	}
	return p
}

// Fields calls fn with the value of every payload field of p, in order: the fields a large
// payload is offloaded from, which may hold a reference. fn must not change the values.
func Fields(p event.Payload, fn func(raw json.RawMessage)) {
	fields(p, false, func(raw *json.RawMessage) { fn(*raw) })
}

// Refs calls fn with every reference p's payload fields hold, in order, repeats included.
func Refs(p event.Payload, fn func(Ref)) {
	Fields(p, func(raw json.RawMessage) {
		if r, ok := Parse(raw); ok {
			fn(r)
		}
	})
}

// HistoryRefs returns the distinct references hist's events hold, in the order they first
// appear.
func HistoryRefs(hist []event.Envelope) []Ref {
	var out []Ref
	seen := map[string]bool{}
	for _, env := range hist {
		Refs(env.Payload, func(r Ref) {
			if !seen[r.SHA256] {
				seen[r.SHA256] = true
				out = append(out, r)
			}
		})
	}
	return out
}

// refText matches a reference's key and hash anywhere in JSON text, whitespace allowed as JSON
// allows it. Inside a JSON string the quotes would be escaped, so it matches only object keys.
var refText = regexp.MustCompile(`"\$flow\.payload"\s*:\s*"sha256:([0-9a-f]{64})"`)

// keyText is what every encoding of a reference holds (Marked's test).
var keyText = []byte(`"` + Key + `"`)

// HashesIn calls fn with the hash of every reference data holds, data being the body of a
// history commit (a JSON array of envelopes): those of its events' payload fields (Refs). A
// body or an event that does not decode (damaged, written by hand, or of a type this build
// does not know) is searched as text for anything shaped like a reference instead, so that
// whatever it may refer to is counted. fn may see a hash more than once.
func HashesIn(data []byte, fn func(sha256 string)) {
	if !bytes.Contains(data, keyText) {
		return // no reference in any form: the common case, decided without decoding
	}
	raws, err := event.DecodeRawEnvelopes(data)
	if err != nil {
		hashesInText(data, fn)
		return
	}
	for _, raw := range raws {
		if !bytes.Contains(raw.Data, keyText) {
			continue
		}
		env, err := raw.Decode()
		if err != nil {
			hashesInText(raw.Data, fn)
			continue
		}
		Refs(env.Payload, func(r Ref) { fn(r.SHA256) })
	}
}

func hashesInText(data []byte, fn func(string)) {
	for _, m := range refText.FindAllSubmatch(data, -1) {
		fn(string(m[1]))
	}
}
