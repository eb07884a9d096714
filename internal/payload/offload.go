package payload

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/flowrun/flow/pkg/event"
)

// Putter writes payloads to the content-addressed store.
type Putter interface {
	// Put stores data under its hash; storing a payload that is there already is no error.
	// It returns once the payload is durable.
	Put(ctx context.Context, data []byte) (Ref, error)
}

// Getter reads offloaded payloads.
type Getter interface {
	// Get returns the payload r refers to, checked against its hash, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, r Ref) ([]byte, error)
}

// ErrNotFound is wrapped by Getter.Get for a payload the store does not hold.
var ErrNotFound = fmt.Errorf("flow: offloaded payload not found")

// needs reports whether raw must be offloaded: over threshold, or marked like a reference
// without being one. A reference itself is left as it is (it is already offloaded: a child's
// output copied into its parent's child.settled, a continue-as-new input into its successor).
func needs(raw json.RawMessage, threshold int) bool {
	if len(raw) == 0 {
		return false
	}
	if Marked(raw) {
		return !IsRef(raw)
	}
	return len(raw) > threshold
}

// offloader offloads the fields of one Offload call.
type offloader struct {
	ctx       context.Context
	put       Putter
	threshold int
	err       error
}

// field offloads *raw if it must be, and replaces it by its reference.
func (o *offloader) field(raw *json.RawMessage) {
	if o.err != nil || !needs(*raw, o.threshold) {
		return
	}
	ref, err := o.put.Put(o.ctx, *raw)
	if err != nil {
		o.err = fmt.Errorf("offloading a payload of %d bytes: %w", len(*raw), err)
		return
	}
	*raw = ref.JSON()
}

// Offload replaces every payload field of ps that must be offloaded (over threshold bytes, or
// marked like a reference) by its reference, after writing it with put: the object is durable
// before the event that refers to it is appended. It changes ps's elements, never the structs
// they point to: a changed payload is a copy. threshold <= 0 means DefaultThreshold. A nil put
// leaves ps as it is. The payload fields are those of fields (fields.go).
func Offload(ctx context.Context, put Putter, threshold int, ps []event.Payload) error {
	if put == nil {
		return nil
	}
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	o := &offloader{ctx: ctx, put: put, threshold: threshold}
	for i, p := range ps {
		some := false
		Fields(p, func(raw json.RawMessage) { some = some || needs(raw, threshold) })
		if !some {
			continue
		}
		ps[i] = fields(p, true, func(raw *json.RawMessage) { o.field(raw) })
		if o.err != nil {
			return o.err
		}
	}
	return nil
}

// Resolve returns the payload raw refers to when it is a reference, read with get, and raw
// itself otherwise (or when get is nil).
func Resolve(ctx context.Context, get Getter, raw json.RawMessage) (json.RawMessage, error) {
	r, ok := Parse(raw)
	if !ok || get == nil {
		return raw, nil
	}
	return get.Get(ctx, r)
}
