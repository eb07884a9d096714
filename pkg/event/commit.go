package event

import (
	"encoding/json"
	"errors"
	"strconv"
)

// A commit's body is a JSON array of envelopes, each in the form Envelope.MarshalJSON writes:
// {"run_id":…,"seq":…,"time":…,"type":…,"data":…}. Every commit is written once and read by the
// history service, the driving worker and every reader of the run, so it is encoded and decoded
// here in one pass over the bytes instead of encoding/json's several.

// MarshalEnvelopes encodes envs as a commit's body: the same JSON as json.Marshal(envs).
func MarshalEnvelopes(envs []Envelope) ([]byte, error) {
	var b []byte
	for i, e := range envs {
		eb, err := e.MarshalJSON()
		if err != nil {
			return nil, err
		}
		if b == nil {
			b = make([]byte, 0, len(envs)*(len(eb)+1)+1)
			b = append(b, '[')
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, eb...)
	}
	if b == nil {
		return []byte("[]"), nil
	}
	return append(b, ']'), nil
}

// DecodeRawEnvelopes decodes a commit's body, a JSON array of envelopes, leaving each payload's
// JSON undecoded: the same envelopes as json.Unmarshal into a []RawEnvelope, except that Data may
// alias data and is only known to be balanced, not valid JSON, until RawEnvelope.Decode
// validates it. Errors wrap ErrMalformed.
func DecodeRawEnvelopes(data []byte) ([]RawEnvelope, error) {
	if raws, ok := scanEnvelopes(data); ok {
		return raws, nil
	}
	// Anything but the form this package writes (another key order, escapes, whitespace in odd
	// places, an error) takes the general decoder, which also says what is wrong.
	var raws []RawEnvelope
	if err := json.Unmarshal(data, &raws); err != nil {
		return nil, errors.Join(ErrMalformed, err)
	}
	return raws, nil
}

// DecodeEnvelopes decodes and validates a commit's body, as json.Unmarshal into an []Envelope
// does. Errors wrap ErrUnknownType or ErrMalformed.
func DecodeEnvelopes(data []byte) ([]Envelope, error) {
	raws, err := DecodeRawEnvelopes(data)
	if err != nil {
		return nil, err
	}
	envs := make([]Envelope, len(raws))
	for i, raw := range raws {
		if envs[i], err = raw.Decode(); err != nil {
			return nil, err
		}
	}
	return envs, nil
}

// scanEnvelopes decodes data if it is in the form MarshalEnvelopes writes, give or take
// whitespace between tokens, and reports whether it was. It never accepts what json.Unmarshal
// rejects, except a malformed payload, which RawEnvelope.Decode rejects.
func scanEnvelopes(data []byte) ([]RawEnvelope, bool) {
	p := scanner{b: data}
	if !p.byte('[') {
		return nil, false
	}
	var out []RawEnvelope
	if p.byte(']') {
		return out, p.end()
	}
	for {
		var r RawEnvelope
		var ok bool
		if !p.byte('{') || !p.key("run_id") {
			return nil, false
		}
		if r.RunID, ok = p.plainString(); !ok || !p.byte(',') || !p.key("seq") {
			return nil, false
		}
		if r.Seq, ok = p.uint(); !ok || !p.byte(',') || !p.key("time") {
			return nil, false
		}
		start := p.i
		if _, ok = p.plainString(); !ok || r.Time.UnmarshalJSON(data[start:p.i]) != nil || !p.byte(',') || !p.key("type") {
			return nil, false
		}
		var t string
		if t, ok = p.plainString(); !ok || !p.byte(',') || !p.key("data") {
			return nil, false
		}
		r.Type = Type(t)
		if r.Data, ok = p.object(); !ok || !p.byte('}') {
			return nil, false
		}
		out = append(out, r)
		if p.byte(']') {
			return out, p.end()
		}
		if !p.byte(',') {
			return nil, false
		}
	}
}

// scanner reads JSON tokens from b at i.
type scanner struct {
	b []byte
	i int
}

func (p *scanner) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c after optional whitespace.
func (p *scanner) byte(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (p *scanner) end() bool {
	p.space()
	return p.i == len(p.b)
}

// key consumes "name": after optional whitespace.
func (p *scanner) key(name string) bool {
	p.space()
	n := len(name)
	if p.i+n+2 > len(p.b) || p.b[p.i] != '"' || string(p.b[p.i+1:p.i+1+n]) != name || p.b[p.i+1+n] != '"' {
		return false
	}
	p.i += n + 2
	return p.byte(':')
}

// plainString consumes a string of printable ASCII without escapes, and returns its contents.
func (p *scanner) plainString() (string, bool) {
	p.space()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			s := string(p.b[p.i+1 : j])
			p.i = j + 1
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return "", false
		}
	}
	return "", false
}

// uint consumes a JSON integer that fits a uint64.
func (p *scanner) uint() (uint64, bool) {
	p.space()
	j := p.i
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
		j++
	}
	if j == p.i || (p.b[p.i] == '0' && j-p.i > 1) {
		return 0, false
	}
	if j < len(p.b) && (p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.b[p.i:j]), 10, 64)
	if err != nil {
		return 0, false
	}
	p.i = j
	return n, true
}

// object consumes a JSON object and returns its bytes, balanced but not validated: the payload's
// decoder validates it.
func (p *scanner) object() ([]byte, bool) {
	p.space()
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return nil, false
	}
	depth := 0
	for j := p.i; j < len(p.b); j++ {
		switch p.b[j] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				out := p.b[p.i : j+1]
				p.i = j + 1
				return out, true
			}
		case '"':
			for j++; j < len(p.b) && p.b[j] != '"'; j++ {
				if p.b[j] == '\\' {
					j++
				}
			}
			if j >= len(p.b) {
				return nil, false
			}
		}
	}
	return nil, false
}
