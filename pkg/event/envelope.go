package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrUnknownType is wrapped by decoding errors for a type that is not in the catalogue.
var ErrUnknownType = errors.New("flow: unknown event type")

// ErrMalformed is wrapped by decoding errors for an envelope or payload that cannot be read.
var ErrMalformed = errors.New("flow: malformed event")

// Event is one event a writer appends: the payload and the UTC time it records.
type Event struct {
	// Time is when the event happens; Payload its typed data.
	Time    time.Time
	Payload Payload
}

// Envelope is one committed event of a run.
type Envelope struct {
	// RunID is the run the event belongs to.
	RunID string
	// Seq is the per-run sequence: 1 for run.started, then 2, 3, ... without gaps.
	Seq uint64
	// Time is when the event was appended.
	Time time.Time
	// Payload holds the typed data; its EventType is the envelope's type.
	Payload Payload
}

// Type returns the envelope's event type.
func (e Envelope) Type() Type {
	if e.Payload == nil {
		return ""
	}
	return e.Payload.EventType()
}

// RawEnvelope is an envelope as encoded, with its payload's JSON undecoded: for readers that
// pass the payload on as it is (the event feed) as well as decode it.
type RawEnvelope struct {
	// RunID, Seq and Time are those of Envelope; Type names the payload, and Data is its JSON.
	RunID string          `json:"run_id"`
	Seq   uint64          `json:"seq"`
	Time  time.Time       `json:"time"`
	Type  Type            `json:"type"`
	Data  json.RawMessage `json:"data"`
}

type envelopeJSON = RawEnvelope

// Decode decodes and validates the payload, as Envelope.UnmarshalJSON does.
func (j RawEnvelope) Decode() (Envelope, error) {
	p, err := DecodePayload(j.Type, j.Data)
	if err != nil {
		return Envelope{}, fmt.Errorf("event seq %d of run %q: %w", j.Seq, j.RunID, err)
	}
	switch {
	case j.RunID == "":
		return Envelope{}, fmt.Errorf("%w: event seq %d has no run_id", ErrMalformed, j.Seq)
	case j.Seq == 0:
		return Envelope{}, fmt.Errorf("%w: event of run %q has no seq (sequences start at 1)", ErrMalformed, j.RunID)
	case j.Time.IsZero():
		return Envelope{}, fmt.Errorf("%w: event seq %d of run %q has no time", ErrMalformed, j.Seq, j.RunID)
	}
	return Envelope{RunID: j.RunID, Seq: j.Seq, Time: j.Time.UTC(), Payload: p}, nil
}

// MarshalJSON encodes the envelope with its type and data.
func (e Envelope) MarshalJSON() ([]byte, error) {
	if e.Payload == nil {
		return nil, fmt.Errorf("%w: envelope seq %d of run %q has no payload", ErrMalformed, e.Seq, e.RunID)
	}
	data, err := json.Marshal(e.Payload)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", e.Type(), err)
	}
	// The same bytes as json.Marshal of an envelopeJSON, without scanning data again: every
	// commit encodes its envelopes.
	b := make([]byte, 0, len(data)+len(e.RunID)+96)
	b = append(b, `{"run_id":`...)
	b = appendJSONString(b, e.RunID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"time":"`...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","type":`...)
	b = appendJSONString(b, string(e.Type()))
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, '}'), nil
}

// appendJSONString appends s as a JSON string: as is when it needs no escaping (IDs and event
// types), else as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// UnmarshalJSON decodes and validates an envelope. Errors wrap ErrUnknownType or ErrMalformed.
func (e *Envelope) UnmarshalJSON(b []byte) error {
	var j envelopeJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	env, err := j.Decode()
	if err != nil {
		return err
	}
	*e = env
	return nil
}

// DecodePayload decodes data as an event of type t and validates it. Errors wrap
// ErrUnknownType or ErrMalformed and name the offending field.
func DecodePayload(t Type, data []byte) (Payload, error) {
	p := New(t)
	if p == nil {
		if t == "" {
			return nil, fmt.Errorf("%w: the type field is missing", ErrMalformed)
		}
		return nil, fmt.Errorf("%w %q: this reader knows %v; upgrade it or check the writer", ErrUnknownType, t, Types())
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || bytes.Equal(data, []byte("null")) {
		return nil, fmt.Errorf("%w: %s has no data object", ErrMalformed, t)
	}
	if err := json.Unmarshal(data, p); err != nil {
		return nil, fmt.Errorf("%w: %s data: %w", ErrMalformed, t, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, t, err)
	}
	return p, nil
}

// Decode decodes one JSON envelope. Unlike json.Unmarshal, every error, syntax errors included,
// wraps ErrMalformed or ErrUnknownType.
func Decode(b []byte) (Envelope, error) {
	var e Envelope
	err := json.Unmarshal(b, &e)
	if err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownType) {
		err = fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return e, err
}
