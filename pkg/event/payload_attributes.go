package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// AttributeType is the type of a search attribute. Values are stable strings stored in every
// history that records an attribute.
type AttributeType string

// The search attribute types.
const (
	// AttrKeyword is a string compared as a whole: IDs, names, codes.
	AttrKeyword AttributeType = "keyword"
	// AttrText is free text; filters compare it whole or by substring (contains).
	AttrText AttributeType = "text"
	// AttrInt is a 64-bit signed integer.
	AttrInt AttributeType = "int"
	// AttrFloat is a 64-bit float (finite).
	AttrFloat AttributeType = "float"
	// AttrBool is true or false.
	AttrBool AttributeType = "bool"
	// AttrTime is a UTC instant, recorded in RFC 3339 with nanoseconds.
	AttrTime AttributeType = "time"
	// AttrKeywordList is a list of keywords; filters test membership (contains).
	AttrKeywordList AttributeType = "keyword_list"
)

// AttributeTypes returns every attribute type, in documentation order.
func AttributeTypes() []AttributeType {
	return []AttributeType{AttrKeyword, AttrText, AttrInt, AttrFloat, AttrBool, AttrTime, AttrKeywordList}
}

// Valid reports whether t is a known attribute type.
func (t AttributeType) Valid() bool { return slices.Contains(AttributeTypes(), t) }

// MaxAttributeName bounds the length of an attribute name; MaxAttributeValue the encoded size of
// one value; MaxAttributes the number of attributes a run may hold.
const (
	MaxAttributeName  = 64
	MaxAttributeValue = 2048
	MaxAttributes     = 64
)

// ReservedAttributeNames are the names of the built-in fields a list filter reads from every
// run (see internal/filter). A search attribute may not take one of them, so that a filter's
// names are never ambiguous.
func ReservedAttributeNames() []string {
	return []string{"run_id", "definition", "status", "queue", "build", "parent", "started", "updated", "detail"}
}

// ValidateAttributeName checks a search attribute name: 1 to MaxAttributeName letters, digits or
// '_', starting with a letter, and not a reserved name. Names are identifiers of the filter
// language, so they need no quoting.
func ValidateAttributeName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: search attribute name is empty", ErrInvalidID)
	}
	if len(name) > MaxAttributeName {
		return fmt.Errorf("%w: search attribute name %q is %d characters long; the limit is %d", ErrInvalidID, name, len(name), MaxAttributeName)
	}
	for i, r := range name {
		letter := 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
		if i == 0 && !letter {
			return fmt.Errorf("%w: search attribute name %q must start with a letter", ErrInvalidID, name)
		}
		if !letter && r != '_' && !('0' <= r && r <= '9') {
			return fmt.Errorf("%w: search attribute name %q has %q at position %d; use letters, digits and '_'", ErrInvalidID, name, r, i)
		}
	}
	if slices.Contains(ReservedAttributeNames(), name) {
		return fmt.Errorf("%w: search attribute name %q is a built-in field of run listings (reserved: %s); choose another name",
			ErrInvalidID, name, strings.Join(ReservedAttributeNames(), ", "))
	}
	return nil
}

// AttributeDecl declares one search attribute of a workflow definition: its name and type. A
// definition publishes its declarations with its registration (FLOW_DEFINITIONS), so that the
// ingress can type a start's attributes and the history service a filter's.
type AttributeDecl struct {
	// Name is the attribute's name, as filters and upserts write it; Type its type.
	Name string        `json:"name"`
	Type AttributeType `json:"type"`
}

// Validate checks the declaration's name and type.
func (d AttributeDecl) Validate() error {
	if err := ValidateAttributeName(d.Name); err != nil {
		return err
	}
	if !d.Type.Valid() {
		return fmt.Errorf("search attribute %q has unknown type %q; use one of %s", d.Name, d.Type, attributeTypeNames())
	}
	return nil
}

func attributeTypeNames() string {
	names := make([]string, 0, 7)
	for _, t := range AttributeTypes() {
		names = append(names, string(t))
	}
	return strings.Join(names, ", ")
}

// AttributeValue is one typed search attribute value as recorded in history: the type travels
// with the value, so that a reader (the runs index, a filter) needs no declaration to read it.
// Value is canonical JSON for the type: a string (keyword, text, time in RFC 3339 UTC), an integer
// (int), a number (float), true or false (bool), or an array of strings (keyword_list).
type AttributeValue struct {
	// Type is the attribute's declared type; Value its JSON value, of that type.
	Type  AttributeType   `json:"type"`
	Value json.RawMessage `json:"value"`
}

// Validate checks that Value is the canonical JSON of a value of Type.
func (v AttributeValue) Validate() error {
	if !v.Type.Valid() {
		return fmt.Errorf("unknown attribute type %q; use one of %s", v.Type, attributeTypeNames())
	}
	if len(v.Value) > MaxAttributeValue {
		return fmt.Errorf("the %s value is %d bytes long; the limit is %d", v.Type, len(v.Value), MaxAttributeValue)
	}
	c, err := CoerceAttribute(v.Type, v.Value)
	if err != nil {
		return err
	}
	if !bytes.Equal(c.Value, v.Value) {
		return fmt.Errorf("the %s value %s is not in canonical form %s", v.Type, v.Value, c.Value)
	}
	return nil
}

// Equal reports whether two values have the same type and the same canonical value.
func (v AttributeValue) Equal(o AttributeValue) bool {
	return v.Type == o.Type && bytes.Equal(v.Value, o.Value)
}

// String renders the value as a filter literal would write it.
func (v AttributeValue) String() string { return string(v.Value) }

// Str returns the value of a keyword, text or time attribute as text.
func (v AttributeValue) Str() (string, bool) {
	if v.Type != AttrKeyword && v.Type != AttrText && v.Type != AttrTime {
		return "", false
	}
	if n := len(v.Value); n >= 2 && v.Value[0] == '"' && v.Value[n-1] == '"' && bytes.IndexByte(v.Value, '\\') < 0 {
		return string(v.Value[1 : n-1]), true // no escapes: the JSON string's bytes are its value
	}
	var s string
	return s, json.Unmarshal(v.Value, &s) == nil
}

// Int returns the value of an int attribute.
func (v AttributeValue) Int() (int64, bool) {
	n, err := strconv.ParseInt(string(v.Value), 10, 64)
	return n, v.Type == AttrInt && err == nil
}

// Float returns the value of an int or float attribute as a float.
func (v AttributeValue) Float() (float64, bool) {
	f, err := strconv.ParseFloat(string(v.Value), 64)
	return f, (v.Type == AttrFloat || v.Type == AttrInt) && err == nil
}

// Bool returns the value of a bool attribute.
func (v AttributeValue) Bool() (bool, bool) {
	return string(v.Value) == "true", v.Type == AttrBool && (string(v.Value) == "true" || string(v.Value) == "false")
}

// Time returns the value of a time attribute.
func (v AttributeValue) Time() (time.Time, bool) {
	s, ok := v.Str()
	if !ok || v.Type != AttrTime {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// List returns the value of a keyword_list attribute.
func (v AttributeValue) List() ([]string, bool) {
	var l []string
	return l, v.Type == AttrKeywordList && json.Unmarshal(v.Value, &l) == nil
}

// Attributes are search attribute values by name.
type Attributes map[string]AttributeValue

// Validate checks every name and value.
func (a Attributes) Validate() error {
	if len(a) > MaxAttributes {
		return fmt.Errorf("%d search attributes; the limit is %d", len(a), MaxAttributes)
	}
	for _, name := range slices.Sorted(maps.Keys(a)) {
		if err := ValidateAttributeName(name); err != nil {
			return err
		}
		if err := a[name].Validate(); err != nil {
			return fmt.Errorf("search attribute %q: %w", name, err)
		}
	}
	return nil
}

// Equal reports whether a and b hold the same names with equal values.
func (a Attributes) Equal(b Attributes) bool {
	return maps.EqualFunc(a, b, AttributeValue.Equal)
}

// Merge returns a copy of a with every value of b set over it; a and b are not changed.
func (a Attributes) Merge(b Attributes) Attributes {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make(Attributes, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

// ErrAttribute matches every error of NewAttribute, CoerceAttribute and ParseAttribute: a value
// that is not of its attribute's type.
var ErrAttribute = errors.New("flow: invalid search attribute value")

func attrError(t AttributeType, format string, args ...any) error {
	article := "a"
	if t == AttrInt {
		article = "an"
	}
	return fmt.Errorf("%w: %s; %s %s attribute takes %s", ErrAttribute, fmt.Sprintf(format, args...), article, t, attrShape(t))
}

// attrShape says what a value of type t looks like.
func attrShape(t AttributeType) string {
	switch t {
	case AttrKeyword, AttrText:
		return "a string"
	case AttrInt:
		return "an integer, e.g. 42"
	case AttrFloat:
		return "a number, e.g. 4.2"
	case AttrBool:
		return "true or false"
	case AttrTime:
		return `a time in RFC 3339, e.g. "2026-12-01T10:00:00Z", or a date "2026-12-01"`
	case AttrKeywordList:
		return `a list of strings, e.g. ["a", "b"]`
	}
	return "a value of a known type"
}

// NewAttribute converts a Go value to a value of type t: a string for keyword and text; any Go
// integer for int; any Go number for float; a bool; a time.Time for time; a []string for
// keyword_list; or, for any type, a string that ParseAttribute reads as one ("42", "2026-12-01",
// "a,b"), as the ingress accepts. A json.RawMessage is read as CoerceAttribute reads JSON.
func NewAttribute(t AttributeType, v any) (AttributeValue, error) {
	if !t.Valid() {
		return AttributeValue{}, fmt.Errorf("%w: unknown attribute type %q; use one of %s", ErrAttribute, t, attributeTypeNames())
	}
	switch x := v.(type) {
	case json.RawMessage:
		return CoerceAttribute(t, x)
	case AttributeValue:
		if x.Type != t {
			return AttributeValue{}, attrError(t, "got a %s value", x.Type)
		}
		return CoerceAttribute(t, x.Value)
	case time.Time:
		if t != AttrTime {
			return AttributeValue{}, attrError(t, "got a time.Time")
		}
		return timeValue(x), nil
	case string:
		return ParseAttribute(t, x)
	case []string:
		if t == AttrKeywordList {
			return listValue(x)
		}
	case bool:
		if t == AttrBool {
			return AttributeValue{Type: t, Value: json.RawMessage(strconv.FormatBool(x))}, nil
		}
	}
	if t == AttrInt || t == AttrFloat {
		if n, ok := asNumber(v); ok {
			b, err := json.Marshal(n)
			if err != nil {
				return AttributeValue{}, attrError(t, "%v does not encode: %v", v, err)
			}
			return CoerceAttribute(t, b)
		}
	}
	return AttributeValue{}, attrError(t, "got %T", v)
}

// asNumber returns a Go number as a value json.Marshal renders exactly.
func asNumber(v any) (any, bool) {
	switch x := v.(type) {
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return x, true
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	return nil, false
}

// CoerceAttribute reads raw JSON as a value of type t: the JSON of the type (see AttributeValue),
// or a JSON string that ParseAttribute reads as one, so that command-line and query-string
// input can spell any value as text ("42" for an int, "a,b" for a keyword list).
func CoerceAttribute(t AttributeType, raw json.RawMessage) (AttributeValue, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return AttributeValue{}, attrError(t, "got no value")
	}
	if !json.Valid(raw) {
		return AttributeValue{}, attrError(t, "%s is not valid JSON", raw)
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return AttributeValue{}, attrError(t, "%s: %v", raw, err)
		}
		return ParseAttribute(t, s)
	}
	switch t {
	case AttrInt:
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			if f, ferr := strconv.ParseFloat(string(raw), 64); ferr == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
				n, err = int64(f), nil // 42.0 or 4.2e1: an integer written as a float
			}
		}
		if err != nil {
			return AttributeValue{}, attrError(t, "got %s", raw)
		}
		return AttributeValue{Type: t, Value: json.RawMessage(strconv.FormatInt(n, 10))}, nil
	case AttrFloat:
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return AttributeValue{}, attrError(t, "got %s", raw)
		}
		return floatValue(f), nil
	case AttrBool:
		if string(raw) != "true" && string(raw) != "false" {
			return AttributeValue{}, attrError(t, "got %s", raw)
		}
		return AttributeValue{Type: t, Value: raw}, nil
	case AttrKeywordList:
		var l []string
		if err := json.Unmarshal(raw, &l); err != nil {
			return AttributeValue{}, attrError(t, "got %s", raw)
		}
		return listValue(l)
	}
	return AttributeValue{}, attrError(t, "got %s", raw)
}

// ParseAttribute reads text as a value of type t: keyword and text as they are; int and float
// as decimal numbers; bool as true or false; time in RFC 3339 or as a date (YYYY-MM-DD, midnight
// UTC); keyword_list as comma-separated keywords.
func ParseAttribute(t AttributeType, s string) (AttributeValue, error) {
	switch t {
	case AttrKeyword, AttrText:
		if t == AttrKeyword && s == "" {
			return AttributeValue{}, attrError(t, "got an empty string")
		}
		b, _ := json.Marshal(s)
		return AttributeValue{Type: t, Value: b}, nil
	case AttrTime:
		tm, err := ParseAttributeTime(s)
		if err != nil {
			return AttributeValue{}, attrError(t, "%v", err)
		}
		return timeValue(tm), nil
	case AttrInt:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return AttributeValue{}, attrError(t, "got %q", s)
		}
		return AttributeValue{Type: t, Value: json.RawMessage(strconv.FormatInt(n, 10))}, nil
	case AttrFloat:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return AttributeValue{}, attrError(t, "got %q", s)
		}
		return floatValue(f), nil
	case AttrBool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return AttributeValue{}, attrError(t, "got %q", s)
		}
		return AttributeValue{Type: t, Value: json.RawMessage(strconv.FormatBool(b))}, nil
	case AttrKeywordList:
		var l []string
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				l = append(l, p)
			}
		}
		return listValue(l)
	}
	return AttributeValue{}, fmt.Errorf("%w: unknown attribute type %q; use one of %s", ErrAttribute, t, attributeTypeNames())
}

// ParseAttributeTime reads a time in RFC 3339 (with or without fractional seconds) or a date
// YYYY-MM-DD (midnight UTC), and returns it in UTC.
func ParseAttributeTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time in RFC 3339 (2026-12-01T10:00:00Z) or a date (2026-12-01)", s)
}

func timeValue(t time.Time) AttributeValue {
	b, _ := json.Marshal(t.UTC().Format(time.RFC3339Nano))
	return AttributeValue{Type: AttrTime, Value: b}
}

func floatValue(f float64) AttributeValue {
	return AttributeValue{Type: AttrFloat, Value: json.RawMessage(strconv.FormatFloat(f, 'g', -1, 64))}
}

func listValue(l []string) (AttributeValue, error) {
	if l == nil {
		l = []string{}
	}
	for _, k := range l {
		if k == "" {
			return AttributeValue{}, attrError(AttrKeywordList, "an element is an empty string")
		}
	}
	b, _ := json.Marshal(l)
	return AttributeValue{Type: AttrKeywordList, Value: b}, nil
}

// AttributesUpserted records a decision that sets search attributes of the run: each value
// replaces the attribute's previous one (from run.started or an earlier upsert). UpsertID is the
// decision's stable ID, in the run's one namespace of decision IDs, so that replay can tell which
// upsert the code re-issues and compare its values.
type AttributesUpserted struct {
	// UpsertID is the decision's ID (ctx.UpsertAttributes), unique in the run; Attributes the
	// values set.
	UpsertID   string     `json:"upsert_id"`
	Attributes Attributes `json:"attributes"`
}

// EventType implements Payload.
func (*AttributesUpserted) EventType() Type { return TypeAttributesUpserted }

func (*AttributesUpserted) PayloadFields() []*json.RawMessage { return nil }

func (p *AttributesUpserted) Summarize() string {
	return fmt.Sprintf("upsert %s: %s", p.UpsertID, p.Attributes.pairs())
}

// pairs renders a as name=value pairs sorted by name, clipped, for a summary.
func (a Attributes) pairs() string {
	parts := make([]string, 0, len(a))
	for _, name := range slices.Sorted(maps.Keys(a)) {
		parts = append(parts, name+"="+a[name].String())
	}
	return clip(strings.Join(parts, " "), summaryInline)
}

// Validate implements Payload.
func (p *AttributesUpserted) Validate() error {
	if err := required("upsert_id", p.UpsertID); err != nil {
		return err
	}
	if len(p.Attributes) == 0 {
		return fieldError("attributes", "must set at least one attribute")
	}
	if err := p.Attributes.Validate(); err != nil {
		return fieldError("attributes", err.Error())
	}
	return nil
}
