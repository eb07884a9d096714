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

// offloader replaces fields in place, copying each struct it changes once.
type offloader struct {
	ctx       context.Context
	put       Putter
	threshold int
	err       error
}

func (o *offloader) field(raw *json.RawMessage) bool {
	if o.err != nil || !needs(*raw, o.threshold) {
		return false
	}
	ref, err := o.put.Put(o.ctx, *raw)
	if err != nil {
		o.err = fmt.Errorf("offloading a payload of %d bytes: %w", len(*raw), err)
		return false
	}
	*raw = ref.JSON()
	return true
}

// Offload replaces every payload field of ps that must be offloaded (over threshold bytes, or
// marked like a reference) by its reference, after writing it with put: the object is durable
// before the event that refers to it is appended. It changes ps's elements, never the structs
// they point to: a changed payload is a copy. threshold <= 0 means DefaultThreshold. A nil put
// leaves ps as it is.
func Offload(ctx context.Context, put Putter, threshold int, ps []event.Payload) error {
	if put == nil {
		return nil
	}
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	o := &offloader{ctx: ctx, put: put, threshold: threshold}
	for i, p := range ps {
		if !o.any(p) {
			continue
		}
		if q := o.payload(p); q != nil {
			ps[i] = q
		}
		if o.err != nil {
			return o.err
		}
	}
	return nil
}

// any reports cheaply whether p has a field to offload.
func (o *offloader) any(p event.Payload) bool {
	n := func(raw json.RawMessage) bool { return needs(raw, o.threshold) }
	switch p := p.(type) {
	case *event.RunStarted:
		return n(p.Input)
	case *event.StepScheduled:
		for _, st := range p.Steps {
			if n(st.Input) {
				return true
			}
		}
	case *event.StepCompleted:
		return n(p.Output)
	case *event.SignalReceived:
		return n(p.Payload)
	case *event.HookCreated:
		return n(p.Metadata)
	case *event.HookReceived:
		return n(p.Payload)
	case *event.ChildScheduled:
		for _, ch := range p.Children {
			if n(ch.Input) {
				return true
			}
		}
	case *event.ChildSettled:
		return n(p.Output)
	case *event.RunCompleted:
		return n(p.Output)
	case *event.RunContinuedAsNew:
		return n(p.Input)
	case *event.RunDebounced:
		return n(p.Input)
	case *event.RunReset:
		return n(p.Input)
	case *event.UpdateReceived:
		return n(p.Payload)
	case *event.UpdateCompleted:
		return n(p.Result)
	case *event.SideEffectRecorded:
		return n(p.Value)
	}
	return false
}

// payload returns a copy of p with its fields offloaded.
func (o *offloader) payload(p event.Payload) event.Payload {
	switch p := p.(type) {
	case *event.RunStarted:
		c := *p
		o.field(&c.Input)
		return &c
	case *event.StepScheduled:
		c := *p
		c.Steps = append([]event.StepSpec(nil), p.Steps...)
		for i := range c.Steps {
			o.field(&c.Steps[i].Input)
		}
		return &c
	case *event.StepCompleted:
		c := *p
		o.field(&c.Output)
		return &c
	case *event.SignalReceived:
		c := *p
		o.field(&c.Payload)
		return &c
	case *event.HookCreated:
		c := *p
		o.field(&c.Metadata)
		return &c
	case *event.HookReceived:
		c := *p
		o.field(&c.Payload)
		return &c
	case *event.ChildScheduled:
		c := *p
		c.Children = append([]event.ChildSpec(nil), p.Children...)
		for i := range c.Children {
			o.field(&c.Children[i].Input)
		}
		return &c
	case *event.ChildSettled:
		c := *p
		o.field(&c.Output)
		return &c
	case *event.RunCompleted:
		c := *p
		o.field(&c.Output)
		return &c
	case *event.RunContinuedAsNew:
		c := *p
		o.field(&c.Input)
		return &c
	case *event.RunDebounced:
		c := *p
		o.field(&c.Input)
		return &c
	case *event.RunReset:
		c := *p
		o.field(&c.Input)
		return &c
	case *event.UpdateReceived:
		c := *p
		o.field(&c.Payload)
		return &c
	case *event.UpdateCompleted:
		c := *p
		o.field(&c.Result)
		return &c
	case *event.SideEffectRecorded:
		c := *p
		o.field(&c.Value)
		return &c
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
