package engine

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/pkg/event"
)

// Payloads is the content-addressed store large payloads are offloaded to
// (docs/large-payloads.md): internal/payload/objstore on JetStream.
type Payloads interface {
	payload.Putter
	payload.Getter
	// Threshold is the size in bytes above which a payload is offloaded.
	Threshold() int
}

// offload replaces the large payload fields of ps by references, writing each payload to the
// store first: an object is durable before the event that refers to it is appended. A crash
// between the two leaves an object no event refers to, which is harmless (docs/large-payloads.md
// says how such objects are collected). ps's elements are replaced, never changed.
func (e *Engine) offload(ctx context.Context, ps []event.Payload) error {
	if e.payloads == nil {
		return nil
	}
	before := slices.Clone(ps)
	if err := payload.Offload(ctx, e.payloads, e.payloads.Threshold(), ps); err != nil {
		return err
	}
	if !slices.Equal(before, ps) {
		return e.faults.Hit(fault.AfterPayloadBeforeAppend)
	}
	return nil
}

// offloadStarted offloads the input of run.started.
func (e *Engine) offloadStarted(ctx context.Context, started *event.RunStarted) (*event.RunStarted, error) {
	ps := []event.Payload{started}
	if err := e.offload(ctx, ps); err != nil {
		return nil, err
	}
	return ps[0].(*event.RunStarted), nil
}

// offloadOutput returns a step attempt's outcome with a large output offloaded: written to the
// store as the compact JSON step.completed records, and replaced by its reference, so that the
// run's snapshot (and the memory of this process) never holds it. An output that is not JSON
// is left for core.StepResult to refuse.
func (e *Engine) offloadOutput(ctx context.Context, out core.StepOutcome) core.StepOutcome {
	if e.payloads == nil || out.Err != nil || len(out.Output) <= e.payloads.Threshold() && !payload.Marked(out.Output) {
		return out
	}
	canon, err := core.CanonicalJSON(out.Output)
	if err != nil {
		return out
	}
	ps := []event.Payload{&event.StepCompleted{Output: canon}}
	if err := e.offload(ctx, ps); err != nil {
		// The attempt fails and is retried: it stores the same bytes under the same name again,
		// which the store finds there.
		return core.StepOutcome{Err: &event.ErrorInfo{Kind: "payload", Message: "storing the step's output: " + err.Error()}}
	}
	out.Output = ps[0].(*event.StepCompleted).Output
	return out
}

// resolveInput returns an attempt with its input read from the store when history holds a
// reference to it: step code sees the bytes.
func (e *Engine) resolveInput(ctx context.Context, a core.Attempt) (core.Attempt, error) {
	if e.payloads == nil || !payload.Marked(a.Input) {
		return a, nil
	}
	in, err := payload.Resolve(ctx, e.payloads, a.Input)
	if err != nil {
		return a, err
	}
	a.Input = json.RawMessage(in)
	return a, nil
}
