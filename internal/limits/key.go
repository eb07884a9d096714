package limits

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// ErrNoKey is wrapped by Resolve's error when the input holds no usable key at the control's
// key path.
var ErrNoKey = errors.New("flow: no flow-control key in the input")

// MaxKeyLength bounds a flow-control key.
const MaxKeyLength = 256

// CheckPath checks a key path: "$" then one or more ".name" segments (letters, digits, '_' or
// '-'), such as "$.customer" or "$.order.region" (core.CheckKeyPath).
func CheckPath(path string) error { return core.CheckKeyPath(path) }

func splitPath(path string) ([]string, error) { return core.SplitKeyPath(path) }

// KeyOf returns the key at path in input, a JSON object: a string as is, a number or a bool as
// its JSON text. Anything else (absent, null, an object, an array) is an error wrapping ErrNoKey.
func KeyOf(path string, input json.RawMessage) (string, error) {
	parts, err := splitPath(path)
	if err != nil {
		return "", err
	}
	cur := input
	for i, p := range parts {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err != nil || obj == nil {
			return "", fmt.Errorf("%w: %s is not an object, so %s has no value", ErrNoKey, "$."+strings.Join(parts[:i], "."), path)
		}
		v, ok := obj[p]
		if !ok {
			return "", fmt.Errorf("%w: the input has no field at %s; add it, or start the run with an explicit key", ErrNoKey, path)
		}
		cur = v
	}
	cur = bytes.TrimSpace(cur)
	var key string
	switch {
	case len(cur) > 0 && cur[0] == '"':
		if err := json.Unmarshal(cur, &key); err != nil {
			return "", fmt.Errorf("%w: %s: %v", ErrNoKey, path, err)
		}
	case string(cur) == "true" || string(cur) == "false":
		key = string(cur)
	case len(cur) > 0 && (cur[0] == '-' || cur[0] >= '0' && cur[0] <= '9'):
		if _, err := strconv.ParseFloat(string(cur), 64); err != nil {
			return "", fmt.Errorf("%w: %s is not a number: %v", ErrNoKey, path, err)
		}
		key = string(cur)
	default:
		return "", fmt.Errorf("%w: the value at %s is %s; a key must be a string, a number or a bool", ErrNoKey, path, describe(cur))
	}
	if key == "" {
		return "", fmt.Errorf("%w: the value at %s is an empty string", ErrNoKey, path)
	}
	if len(key) > MaxKeyLength {
		return "", fmt.Errorf("%w: the value at %s is %d bytes long; the limit is %d", ErrNoKey, path, len(key), MaxKeyLength)
	}
	return key, nil
}

func describe(v []byte) string {
	switch {
	case string(v) == "null":
		return "null"
	case len(v) > 0 && v[0] == '{':
		return "an object"
	case len(v) > 0 && v[0] == '[':
		return "an array"
	}
	return "not a key"
}

// Resolve returns the control a run of definition with input starts under, from the
// registration's control spec (nil for none) and the start's (nil for none; one that sets only
// Key gives the registration's control that key; else it replaces the registration's): a copy with the group defaulted to definition and, when a key-scoped limit
// applies, the key read from the input at KeyPath unless the start gave it. It returns nil for a
// run without flow control, and an error saying what to fix for a control that is malformed or
// whose key the input does not hold.
func Resolve(definition string, registered, atStart *event.FlowControl, input json.RawMessage) (*event.FlowControl, error) {
	spec := registered
	keyOnly := atStart != nil && atStart.Concurrency == 0 && atStart.KeyConcurrency == 0 && atStart.Rate == 0 && atStart.KeyRate == 0
	if atStart != nil && !keyOnly {
		spec = atStart
	}
	if spec == nil {
		if keyOnly {
			return nil, fmt.Errorf("flow: the start gives a flow-control key, but %q is registered without flow control; register it with flow.WithFlowControl, or give the limits at start", definition)
		}
		return nil, nil
	}
	c := *spec
	if keyOnly {
		c.Key = atStart.Key
	}
	if c.Group == "" {
		c.Group = definition
	}
	if c.OnLimit == "" {
		c.OnLimit = event.OnLimitQueue
	}
	if c.Keyed() && c.Key == "" {
		if c.KeyPath == "" {
			return nil, fmt.Errorf("flow: the flow control of %q has a per-key limit but no key path; set the key path (such as \"$.customer\") or give a key at start", definition)
		}
		key, err := KeyOf(c.KeyPath, input)
		if err != nil {
			return nil, err
		}
		c.Key = key
	}
	if !c.Keyed() {
		c.Key, c.KeyPath = "", ""
	}
	if len(c.Key) > MaxKeyLength {
		return nil, fmt.Errorf("%w: the key is %d bytes long; the limit is %d", ErrNoKey, len(c.Key), MaxKeyLength)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("flow: the flow control of %q is malformed: %w", definition, err)
	}
	return &c, nil
}
