package flow

import (
	"encoding/json"
	"fmt"
	"runtime/debug"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// UpdateStatus is the state of an update: received, accepted, rejected or completed.
type UpdateStatus = core.UpdateStatus

// Update statuses.
const (
	UpdateReceived  = core.UpdateReceived
	UpdateAccepted  = core.UpdateAccepted
	UpdateRejected  = core.UpdateRejected
	UpdateCompleted = core.UpdateCompleted
	// UpdateAborted is the status Client.UpdateResult reports for an update whose run ended
	// before the update settled.
	UpdateAborted UpdateStatus = "aborted"
)

// UpdateHandler handles the updates called by one name of one workflow, with payloads decoded
// into I.
type UpdateHandler[I any] struct {
	// Validate accepts the update by returning nil, or rejects it with the error it returns
	// (recorded as update.rejected; the caller gets it). Nil accepts every update whose
	// payload decodes into I. It judges each update once, at the decision that records the
	// verdict: replay uses the recorded update.accepted or update.rejected and never calls
	// Validate again, so a changed validator applies to updates judged after its deploy and
	// leaves older runs replayable. Like the workflow function it reads only the context and
	// the update (no clock, I/O or randomness): a decision whose commit was lost is taken again.
	Validate func(ctx *Context, u *Update, payload I) error
	// Complete, when set, completes an accepted update at once with its result (encoded to
	// JSON), or fails it with the error it returns, in the same commit as the acceptance. Nil
	// leaves the accepted update open: the workflow completes it later with
	// [Context.CompleteUpdate] or [Context.FailUpdate], after steps if it wants. It is part of
	// the workflow's decisions: a pure function of the context (the run's history) and the
	// update, because replay runs it again and compares its outcome with the recorded
	// update.completed.
	Complete func(ctx *Context, u *Update, payload I) (any, error)
}

// updateFunc decides update u; with accepted set (replay of a recorded acceptance) it decides
// only the at-once completion and never validates.
type updateFunc func(ctx *Context, u *Update, accepted bool) core.UpdateDecision

// RegisterUpdate registers h as the handler of updates called name to runs of workflow
// definition. An update is judged at the run's next decision, before the workflow is asked for
// anything else, so that an update arriving while the run waits on a step is handled without
// disturbing the step. An update with no handler registered is rejected (kind
// "no_update_handler"); one whose payload does not decode into I is rejected with kind
// "invalid_input". Registration panics on a programming error, as [RegisterWorkflow] does.
func RegisterUpdate[I any](r *Registry, definition, name string, h UpdateHandler[I]) {
	if err := event.ValidateName("workflow", definition); err != nil {
		panic(fmt.Sprintf("flow: RegisterUpdate: %v", err))
	}
	if err := event.ValidateName("update", name); err != nil {
		panic(fmt.Sprintf("flow: RegisterUpdate(%q): %v", definition, err))
	}
	fn := func(ctx *Context, u *Update, accepted bool) core.UpdateDecision {
		if accepted && h.Complete == nil {
			return core.UpdateDecision{}
		}
		var in I
		if err := json.Unmarshal(u.Payload, &in); err != nil {
			e := &event.ErrorInfo{Kind: KindInvalidInput,
				Message: fmt.Sprintf("the payload of update %q does not decode into %T: %v", name, in, err)}
			if accepted {
				return core.UpdateDecision{Complete: true, Error: e}
			}
			return core.UpdateDecision{Reject: e}
		}
		if h.Validate != nil && !accepted {
			if err := h.Validate(ctx, u, in); err != nil {
				return core.UpdateDecision{Reject: &event.ErrorInfo{Kind: KindOf(err), Message: err.Error()}}
			}
		}
		if h.Complete == nil {
			return core.UpdateDecision{}
		}
		out, err := h.Complete(ctx, u, in)
		if err != nil {
			return core.UpdateDecision{Complete: true, Error: &event.ErrorInfo{Kind: KindOf(err), Message: err.Error()}}
		}
		b, err := json.Marshal(out)
		if err != nil {
			return core.UpdateDecision{Complete: true, Error: &event.ErrorInfo{Kind: KindInvalidOutput,
				Message: fmt.Sprintf("the result of update %q does not encode to JSON: %v", name, err)}}
		}
		return core.UpdateDecision{Complete: true, Result: b}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.updates[definition] == nil {
		r.updates[definition] = map[string]updateFunc{}
	}
	if _, dup := r.updates[definition][name]; dup {
		panic(fmt.Sprintf("flow: RegisterUpdate: update %q of workflow %q is already registered", name, definition))
	}
	r.updates[definition][name] = fn
}

// decideUpdate implements core.UpdateDecider for the registry's runtime (runtime.go): it runs
// the handler registered for update u of a run of definition. With accepted set (replay of a commit that recorded u's acceptance) the
// validator does not run and only the handler's at-once completion is decided; with no handler
// registered the recorded acceptance stands alone. A panic is recovered into a
// *core.PanicError, which blocks the run as a panic of the workflow does.
func (r *Registry) decideUpdate(definition string, _ json.RawMessage, history *core.Snapshot, cu *core.Update, accepted bool) (dec core.UpdateDecision, err error) {
	u := updateOf(cu)
	r.mu.RLock()
	fn := r.updates[definition][u.Name]
	r.mu.RUnlock()
	if fn == nil {
		if accepted {
			return core.UpdateDecision{}, nil
		}
		return core.UpdateDecision{Reject: &event.ErrorInfo{Kind: core.UpdateNoHandler,
			Message: fmt.Sprintf("workflow %q registers no update handler for %q", definition, u.Name)}}, nil
	}
	ctx := &Context{s: history, replaying: r.replaying, logger: r.logger, payloads: r.payloads.get()}
	defer func() {
		if p := recover(); p != nil {
			dec, err = core.UpdateDecision{}, &core.PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	u.Payload = ctx.resolved(u.Payload) // u is the handler's own copy
	return fn(ctx, u, accepted), nil
}

// Updates returns the run's updates in the order they were received.
func (c *Context) Updates() []*Update { return updatesOf(c.s.UpdateList()) }

// OpenUpdates returns the accepted updates that wait for their result, in the order they were
// received: the ones to complete with [Context.CompleteUpdate].
func (c *Context) OpenUpdates() []*Update { return updatesOf(c.s.OpenUpdates()) }

// Update returns update id of the run, or nil if it has none.
func (c *Context) Update(id string) *Update { return updateOf(c.s.Updates[id]) }

// updatesOf returns the views of us, in order.
func updatesOf(us []*core.Update) []*Update {
	if us == nil {
		return nil
	}
	out := make([]*Update, len(us))
	for i, u := range us {
		out[i] = updateOf(u)
	}
	return out
}

// CompleteUpdate is the decision that completes accepted update id with result (encoded to
// JSON): the caller waiting on the update gets it. Completing an update that is not open is an
// invalid decision.
func (c *Context) CompleteUpdate(id string, result any) Decision {
	b, err := encode(result)
	if err != nil {
		return core.Invalid{What: fmt.Sprintf("result of update %q", id), Err: err}
	}
	return core.CompleteUpdate{ID: id, Result: b}
}

// FailUpdate is the decision that completes accepted update id with err: the caller waiting on
// the update gets an *UpdateError matching ErrUpdateFailed.
func (c *Context) FailUpdate(id string, err error) Decision {
	if err == nil {
		return core.Invalid{What: fmt.Sprintf("FailUpdate(%q)", id), Err: fmt.Errorf("nil error")}
	}
	return core.CompleteUpdate{ID: id, Error: &event.ErrorInfo{Kind: KindOf(err), Message: err.Error()}}
}

// DecodeUpdate decodes the payload of u into v.
func DecodeUpdate(u *Update, v any) error {
	if err := json.Unmarshal(u.Payload, v); err != nil {
		return fmt.Errorf("decoding the payload of update %q: %w", u.ID, err)
	}
	return nil
}
