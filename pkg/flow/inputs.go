package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
)

// Start starts a run of definition with input (encoded to JSON; a json.RawMessage is used as
// is) and returns its ID. A live worker of the queue must serve the definition (else the error
// wraps ErrNoWorker); the run records its build ID and patch markers. Starting an existing run
// ID again with the same definition and input returns it; with different ones it returns an
// error wrapping ErrRunExists. opts may be nil.
func (c *Client) Start(ctx context.Context, definition string, input any, opts *StartOptions) (string, error) {
	if opts == nil {
		opts = &StartOptions{}
	}
	queue := opts.Queue
	if queue == "" {
		queue = c.queue
	}
	in, err := encode(input)
	if err != nil {
		return "", fmt.Errorf("%w: encoding the input: %w", ErrInvalidInput, err)
	}
	if err := event.ValidateName("definition", definition); err != nil {
		return "", err
	}
	runID := opts.RunID
	if runID == "" {
		runID = nuid.Next() // chosen here, so that a retried request starts the same run
	} else if err := event.ValidateRunID(runID); err != nil {
		return "", err
	}
	ext := map[string]string{api.ExtRunID: runID, api.ExtQueue: queue}
	if len(opts.Attributes) > 0 {
		attrs, err := encodeAttrs(opts.Attributes)
		if err != nil {
			return "", err
		}
		b, err := json.Marshal(attrs)
		if err != nil {
			return "", fmt.Errorf("%w: encoding the search attributes: %w", ErrInvalidInput, err)
		}
		ext[api.ExtAttributes] = string(b)
	}
	if err := opts.policyExtensions(ext); err != nil {
		return "", err
	}
	if err := controlExtensions(ext, opts); err != nil {
		return "", err
	}
	if err := timeoutExtensions(ext, opts); err != nil {
		return "", err
	}
	resp, err := c.t.input(ctx, api.StartSubject(definition), "start", runID, in, ext)
	if err != nil {
		return "", err
	}
	c.seen.note(resp.RunID, 1)
	return resp.RunID, nil
}

// Cancel requests cancellation of run runID and returns the ID of the run that received the
// request: runID, or, if runID continued as new, the latest run it continued as. Requesting it
// again is accepted.
func (c *Client) Cancel(ctx context.Context, runID, reason string) (string, error) {
	return c.end(ctx, api.CancelSubject, "cancel", runID, reason)
}

// Terminate ends run runID (or the latest run it continued as) as failed at once, whatever its
// code would decide, and returns the ID of the run it ended.
func (c *Client) Terminate(ctx context.Context, runID, reason string) (string, error) {
	return c.end(ctx, api.TerminateSubject, "terminate", runID, reason)
}

func (c *Client) end(ctx context.Context, subject func(string) string, kind, runID, reason string) (string, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return "", err
	}
	body, err := json.Marshal(api.CancelRequest{Reason: reason})
	if err != nil {
		return "", err
	}
	resp, err := c.t.input(ctx, subject(runID), kind, nuid.Next(), body, nil)
	if err != nil {
		return "", err
	}
	return resp.RunID, nil
}

// DeliveryOptions adjust [Client.Signal] and [Client.DeliverHook]. The zero value works.
type DeliveryOptions struct {
	// DeliveryID deduplicates the delivery: a repeated ID with the same payload (and signal
	// name) is applied once; with another, the call returns an error wrapping
	// ErrDeliveryConflict. Empty generates one.
	DeliveryID string
}

// Signal delivers signal name with payload (encoded to JSON) to run runID and returns the ID of
// the run that received it: runID, or, if runID continued as new, the latest run it continued
// as. The signal is in the run's history when Signal returns. opts may be nil.
func (c *Client) Signal(ctx context.Context, runID, name string, payload any, opts *DeliveryOptions) (string, error) {
	if opts == nil {
		opts = &DeliveryOptions{}
	}
	p, err := encode(payload)
	if err != nil {
		return "", fmt.Errorf("%w: encoding the signal payload: %w", ErrInvalidInput, err)
	}
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return "", err
	}
	if err := event.ValidateName("signal", name); err != nil {
		return "", err
	}
	resp, err := c.t.input(ctx, api.SignalSubject(runID, name), "signal", deliveryID(opts.DeliveryID), p, nil)
	if err != nil {
		return "", err
	}
	return resp.RunID, nil
}

// DeliverHook delivers payload (encoded to JSON) to the hook whose token is token (see
// [Context.HookToken]) and returns the ID of the run that owns it. A hook takes one delivery:
// another one returns an error wrapping ErrAlreadyReceived; an unknown token ErrNotFound. opts
// may be nil.
func (c *Client) DeliverHook(ctx context.Context, token string, payload any, opts *DeliveryOptions) (string, error) {
	if opts == nil {
		opts = &DeliveryOptions{}
	}
	p, err := encode(payload)
	if err != nil {
		return "", fmt.Errorf("%w: encoding the hook payload: %w", ErrInvalidInput, err)
	}
	if token == "" || strings.ContainsAny(token, ". \t\r\n*>") {
		return "", fmt.Errorf("%w: hook token %q is not a token Flow issues (use ctx.HookToken's)", ErrInvalidInput, token)
	}
	resp, err := c.t.input(ctx, api.HookSubject(token), "hook", deliveryID(opts.DeliveryID), p, nil)
	if err != nil {
		return "", err
	}
	return resp.RunID, nil
}

func deliveryID(id string) string {
	if id == "" {
		return nuid.Next()
	}
	return id
}
