package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/payload"
)

// Large payloads (docs/large-payloads.md): a payload over the offload threshold is kept in the
// FLOW_PAYLOADS object store and the history holds a reference to it. Workflow code never sees
// the reference: the Context's readers (RawInput, Input, StepOutput, Signal, Hook, Child,
// SideEffect, update payloads) return the bytes, read once and then cached by the store.

// payloadSource is the store a registry's workflow code reads offloaded payloads from.
type payloadSource struct {
	mu sync.RWMutex
	g  payload.Getter
}

func (p *payloadSource) get() payload.Getter {
	if p == nil {
		return nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.g
}

// usePayloads makes the registry's workflow code read the payloads a history holds by reference
// from g (the worker sets the FLOW_PAYLOADS store). Without it, code reads the references
// themselves.
func (r *Registry) usePayloads(g payload.Getter) {
	r.payloads.mu.Lock()
	defer r.payloads.mu.Unlock()
	r.payloads.g = g
}

// payloadError is what a Context reader panics with when an offloaded payload cannot be read:
// the decision fails (the run shows blocked with this error) and is tried again.
type payloadError struct {
	// Ref is the reference that could not be resolved; Err why (Unwrap returns it).
	Ref payload.Ref
	Err error
}

func (e *payloadError) Error() string {
	return fmt.Sprintf("flow: reading offloaded payload %s: %v", e.Ref, e.Err)
}

func (e *payloadError) Unwrap() error { return e.Err }

// payloadTimeout bounds one read of an offloaded payload by workflow code.
const payloadTimeout = time.Minute

// resolved returns raw, or the payload it refers to when it is a reference.
func (c *Context) resolved(raw json.RawMessage) json.RawMessage {
	if c.payloads == nil || !payload.Marked(raw) {
		return raw
	}
	r, ok := payload.Parse(raw)
	if !ok {
		return raw
	}
	ctx, cancel := context.WithTimeout(context.Background(), payloadTimeout)
	defer cancel()
	b, err := c.payloads.Get(ctx, r)
	if err != nil {
		panic(&payloadError{Ref: r, Err: err})
	}
	return b
}

// Payload returns the bytes raw holds: raw itself, or, when it is a reference to an offloaded
// payload (a snapshot's or an event's field), the payload, which the history service reads from
// the FLOW_PAYLOADS object store, and which is checked against its hash. A payload the store no
// longer holds is an error wrapping payload.ErrNotFound ("flow: offloaded payload not found").
// Client.Result resolves the run's output this way itself.
func (c *Client) Payload(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	r, ok := payload.Parse(raw)
	if !ok {
		return raw, nil
	}
	b := make([]byte, 0, min(r.Size, 64<<20))
	for {
		var resp api.PayloadResponse
		err := c.query(ctx, api.SubjectPayload, api.PayloadRequest{SHA256: r.SHA256, Size: r.Size, Offset: int64(len(b))}, &resp)
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%w: %s", payload.ErrNotFound, r)
		}
		if err != nil {
			return nil, fmt.Errorf("flow: reading offloaded payload %s: %w", r, err)
		}
		b = append(b, resp.Data...)
		if int64(len(b)) >= r.Size || len(resp.Data) == 0 {
			break
		}
	}
	if !r.Matches(b) {
		return nil, fmt.Errorf("flow: reading offloaded payload %s: the history service answered %d bytes that do not match its hash", r, len(b))
	}
	return b, nil
}

// ResolvePayloads replaces every reference to an offloaded payload in s (a snapshot from
// Client.Snapshot or Client.Describe, which shows references, as history holds them) by the
// payload's bytes: the run's input and output, steps' inputs and outputs, signals, hooks,
// children, updates and side effects. It reads each payload once, and changes s in place.
func (c *Client) ResolvePayloads(ctx context.Context, s *Snapshot) error {
	for raw := range s.payloadFields() {
		if !payload.Marked(*raw) {
			continue
		}
		b, err := c.Payload(ctx, *raw)
		if err != nil {
			return err
		}
		*raw = b
	}
	return nil
}
