package event

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// Described is what every payload type of the catalogue declares next to its type, besides
// [Payload]: what the code that treats every event alike needs to know of it (payload offload
// and resolution, the payload collector, the web UI's timeline), so that none of it switches
// over the types. A type of [Types] that does not implement it fails TestCatalogueDeclares.
type Described interface {
	Payload
	// PayloadFields returns the addresses of the event's payload fields: the JSON values that
	// a workflow or its caller chose (inputs, outputs, signal, hook and update payloads, side
	// effect values). They may be large, so they are the fields a large payload is offloaded
	// from and replaced by a reference (docs/large-payloads.md), and the only fields that may
	// hold one. The order is fixed: the struct's fields in order, a slice's elements in order.
	// It returns nil for an event that has none. The pointers are into the payload: setting
	// through them changes it (see [CopyPayload]).
	PayloadFields() []*json.RawMessage
	// Summarize renders the event in one line for humans, its JSON values compact and clipped.
	Summarize() string
}

// PayloadFields returns p's payload fields ([Described.PayloadFields]), or nil when p's type
// declares none.
func PayloadFields(p Payload) []*json.RawMessage {
	if d, ok := p.(Described); ok {
		return d.PayloadFields()
	}
	return nil
}

// Summarize returns p's one-line summary ([Described.Summarize]), or "" when p's type declares
// none.
func Summarize(p Payload) string {
	if d, ok := p.(Described); ok {
		return d.Summarize()
	}
	return ""
}

// CopyPayload returns a copy of p whose payload fields may be set without changing p: the
// struct is copied, and so is every slice it holds directly (the slices whose elements hold
// payload fields); everything else is shared. p must be a non-nil pointer to a struct, as every
// catalogued payload is.
func CopyPayload(p Payload) Payload {
	src := reflect.ValueOf(p).Elem()
	dst := reflect.New(src.Type())
	dst.Elem().Set(src)
	for i := range src.NumField() {
		f := dst.Elem().Field(i)
		if f.Kind() != reflect.Slice || f.IsNil() || f.Type() == rawMessageType || !f.CanSet() {
			continue
		}
		c := reflect.MakeSlice(f.Type(), f.Len(), f.Len())
		reflect.Copy(c, f)
		f.Set(c)
	}
	return dst.Interface().(Payload)
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// summaryInline bounds the JSON values and lists a summary shows inline.
const summaryInline = 90

// inline renders a JSON value compactly, clipped, for a summary.
func inline(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return clip(string(raw), summaryInline)
	}
	return clip(b.String(), summaryInline)
}

// clip shortens s to n runes, the last an ellipsis.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// orNone renders a reason, which may be empty, for a summary.
func orNone(s string) string {
	if s == "" {
		return "(no reason)"
	}
	return s
}

// The layouts of the times summaries show.
const (
	summaryClock = "15:04:05.000"
	summaryDate  = "2006-01-02 15:04:05.000"
)
