package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
)

// UpdateError is the outcome of an update that returned no result: rejected, failed, or aborted
// because its run ended first. It matches ErrUpdateRejected, ErrUpdateFailed or
// ErrUpdateAborted.
type UpdateError struct {
	// RunID is the run, UpdateID and Name the update's ID and registered name.
	RunID, UpdateID, Name string
	// Status is UpdateRejected, UpdateCompleted (failed) or UpdateAborted.
	Status UpdateStatus
	// Kind and Message are the recorded error.
	Kind, Message string
}

func (e *UpdateError) Error() string {
	what := "failed"
	switch e.Status {
	case UpdateRejected:
		what = "was rejected"
	case UpdateAborted:
		what = "was aborted"
	}
	return fmt.Sprintf("flow: update %q (%s) of run %q %s: %s", e.UpdateID, e.Name, e.RunID, what, event.ErrorInfo{Kind: e.Kind, Message: e.Message}.Error())
}

// Is matches the sentinel of the error's status.
func (e *UpdateError) Is(target error) bool {
	switch e.Status {
	case UpdateRejected:
		return target == ErrUpdateRejected
	case UpdateAborted:
		return target == ErrUpdateAborted
	}
	return target == ErrUpdateFailed
}

// UpdateOutcome is where an update stands.
type UpdateOutcome struct {
	// RunID is the run that received the update: the run asked for, or the latest run it
	// continued as.
	RunID string
	// UpdateID identifies the update in its run; Name is its registered name.
	UpdateID string
	Name     string
	// Status is received or accepted while the update waits, completed once it has its Result.
	Status UpdateStatus
	// Result is the completed update's result (JSON).
	Result json.RawMessage
	// Created is set by UpdateWithStart when it started the run.
	Created bool
}

// Decode decodes the result of a completed update into v.
func (o *UpdateOutcome) Decode(v any) error {
	if o.Status != UpdateCompleted {
		return fmt.Errorf("update %q of run %q is %s; it has no result yet", o.UpdateID, o.RunID, o.Status)
	}
	if err := json.Unmarshal(o.Result, v); err != nil {
		return fmt.Errorf("decoding the result of update %q into %T: %w", o.UpdateID, v, err)
	}
	return nil
}

// UpdateOptions adjust [Client.Update]. The zero value works.
type UpdateOptions struct {
	// UpdateID identifies the update: the same ID with the same name and payload is applied
	// once and has one outcome (a retry after a lost answer gets it); with another name or
	// payload Update returns an error wrapping ErrDeliveryConflict. Empty generates one.
	UpdateID string
	// Wait makes Update return once the update settled: with its result, or an *UpdateError.
	// Without it Update returns once the update is recorded; read its outcome with
	// [Client.UpdateResult] or [Client.AwaitUpdate].
	Wait bool
}

// Update sends update name with payload (encoded to JSON) to run runID. The update is in the
// run's history when Update returns; the run's next decision accepts or rejects it. With
// opts.Wait, Update then waits (on the history service's notice of the commit, without polling)
// until the update is completed, and returns its result, or an *UpdateError when it was
// rejected, failed, or its run ended first (or a *RunError when the run is blocked, see
// AwaitUpdate). An ended run refuses updates (ErrTerminal). opts may be nil.
func (c *Client) Update(ctx context.Context, runID, name string, payload any, opts *UpdateOptions) (*UpdateOutcome, error) {
	if opts == nil {
		opts = &UpdateOptions{}
	}
	p, err := encode(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding the update payload: %w", ErrInvalidInput, err)
	}
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	if err := event.ValidateName("update", name); err != nil {
		return nil, err
	}
	id, err := updateID(opts.UpdateID)
	if err != nil {
		return nil, err
	}
	resp, err := c.t.input(ctx, api.UpdateSubject(runID, name), "update", id, p, nil)
	if err != nil {
		return nil, err
	}
	out := &UpdateOutcome{RunID: resp.RunID, UpdateID: id, Name: name, Status: UpdateReceived}
	if !opts.Wait {
		return out, nil
	}
	return c.AwaitUpdate(ctx, resp.RunID, id)
}

func updateID(id string) (string, error) {
	if id == "" {
		return nuid.Next(), nil
	}
	return id, event.ValidateUpdateID(id)
}

// UpdateResult returns where update updateID of run runID stands now, without waiting: received
// or accepted, completed with its result, or an *UpdateError.
func (c *Client) UpdateResult(ctx context.Context, runID, updateID string) (*UpdateOutcome, error) {
	return c.updateState(ctx, runID, updateID, 0)
}

// AwaitUpdate waits until update updateID of run runID settled and returns its result, or an
// *UpdateError; or a *RunError with Status StatusBlocked when a decision of the run failed after
// the update was received (a panic in a handler, a non-determinism error): the update waits for
// fixed code, or for an operator. It asks the history service, which answers as soon as the commit that settles
// the update (or ends the run) is stored.
func (c *Client) AwaitUpdate(ctx context.Context, runID, updateID string) (*UpdateOutcome, error) {
	for {
		wait := api.DefaultAwait
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(d), time.Millisecond))
		}
		out, err := c.updateState(ctx, runID, updateID, wait)
		if err != nil || out.Status == UpdateCompleted {
			return out, err
		}
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
}

func (c *Client) updateState(ctx context.Context, runID, updateID string, wait time.Duration) (*UpdateOutcome, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	if err := event.ValidateUpdateID(updateID); err != nil {
		return nil, err
	}
	var st api.UpdateState
	qctx, cancel := context.WithTimeout(ctx, wait+5*time.Second)
	defer cancel()
	if err := c.query(qctx, api.SubjectUpdate, api.UpdateRequest{RunID: runID, UpdateID: updateID, Wait: wait}, &st); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return updateOutcomeOf(&st)
}

// updateOutcomeOf maps an update's state, as the history service reports it, to its outcome,
// or to an *UpdateError when it settled without a result. The test kit reaches it through
// sdk.UpdateOutcomeOf (runtime.go).
func updateOutcomeOf(st *api.UpdateState) (*UpdateOutcome, error) {
	out := &UpdateOutcome{RunID: st.RunID, UpdateID: st.UpdateID, Name: st.Name, Status: st.Status, Result: st.Result}
	if !st.Settled && st.Blocked != nil {
		return nil, &RunError{RunID: st.RunID, Status: StatusBlocked, Kind: st.Blocked.Kind,
			Message: fmt.Sprintf("update %q waits while the run is blocked: %s", st.UpdateID, st.Blocked.Detail)}
	}
	if st.Status == UpdateCompleted && st.Error == nil || !st.Settled {
		return out, nil
	}
	e := &UpdateError{RunID: st.RunID, UpdateID: st.UpdateID, Name: st.Name, Status: st.Status}
	if st.Error != nil {
		e.Kind, e.Message = st.Error.Kind, st.Error.Message
	}
	return nil, e
}

// WithStartOptions adjust [Client.UpdateWithStart] and [Client.SignalWithStart]. RunID is
// required: without it (or with nil options) those calls return an error wrapping
// ErrInvalidInput.
type WithStartOptions struct {
	// RunID is the run to start or to deliver to; required, so that a retry finds the run its
	// first attempt started.
	RunID string
	// Queue overrides the client's queue.
	Queue string
	// UpdateID (for a signal, its delivery ID) deduplicates the input, as in UpdateOptions.
	// Empty generates one.
	UpdateID string
	// Wait makes UpdateWithStart wait for the update's outcome, as UpdateOptions.Wait does.
	Wait bool
	// Attributes are the search attributes the run starts with, as StartOptions.Attributes.
	// An existing run must have started with the same ones.
	Attributes Attrs
}

// UpdateWithStart starts run opts.RunID of definition with input if it does not exist, with
// update name (payload) recorded in the same commit, so that the run never exists without it;
// if the run exists (started with the same definition and input, else ErrRunExists), the
// update is sent to it as Update does. The outcome's Created says whether this call started
// the run.
func (c *Client) UpdateWithStart(ctx context.Context, definition string, input any, name string, payload any, opts *WithStartOptions) (*UpdateOutcome, error) {
	if opts == nil {
		opts = &WithStartOptions{}
	}
	id, err := updateID(opts.UpdateID)
	if err != nil {
		return nil, err
	}
	resp, err := c.withStart(ctx, api.UpdateWithStartSubject, "update_with_start", definition, input, name, payload, opts, id)
	if err != nil {
		return nil, err
	}
	out := &UpdateOutcome{RunID: resp.RunID, UpdateID: id, Name: name, Status: UpdateReceived, Created: resp.Created}
	if !opts.Wait {
		return out, nil
	}
	done, err := c.AwaitUpdate(ctx, resp.RunID, id)
	if done != nil {
		done.Created = resp.Created
	}
	return done, err
}

// SignalWithStart starts run opts.RunID of definition with input if it does not exist, with
// signal name (payload) recorded in the same commit; if the run exists (started with the same
// definition and input, else ErrRunExists), the signal is delivered to it as Signal does. It
// returns the run that received the signal and whether this call started it.
func (c *Client) SignalWithStart(ctx context.Context, definition string, input any, name string, payload any, opts *WithStartOptions) (runID string, created bool, err error) {
	if opts == nil {
		opts = &WithStartOptions{}
	}
	id := deliveryID(opts.UpdateID)
	resp, err := c.withStart(ctx, api.SignalWithStartSubject, "signal_with_start", definition, input, name, payload, opts, id)
	if err != nil {
		return "", false, err
	}
	return resp.RunID, resp.Created, nil
}

func (c *Client) withStart(ctx context.Context, subject func(string, string) string, kind, definition string, input any, name string, payload any,
	opts *WithStartOptions, id string) (*api.InputResponse, error) {
	in, err := encode(input)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding the input: %w", ErrInvalidInput, err)
	}
	p, err := encode(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding the payload: %w", ErrInvalidInput, err)
	}
	if err := event.ValidateName("definition", definition); err != nil {
		return nil, err
	}
	if err := event.ValidateName("input", name); err != nil {
		return nil, err
	}
	if opts.RunID == "" {
		return nil, fmt.Errorf("%w: %s needs WithStartOptions.RunID, so that a retry finds the run it started", ErrInvalidInput, kind)
	}
	if err := event.ValidateRunID(opts.RunID); err != nil {
		return nil, err
	}
	queue := opts.Queue
	if queue == "" {
		queue = c.queue
	}
	attrs, err := encodeAttrs(opts.Attributes)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(api.WithStartRequest{RunID: opts.RunID, Queue: queue, Input: in, Payload: p, Attributes: attrs})
	if err != nil {
		return nil, err
	}
	resp, err := c.t.input(ctx, subject(definition, name), kind, id, body, nil)
	if err != nil {
		return nil, err
	}
	c.seen.note(resp.RunID, 1)
	return resp, nil
}
