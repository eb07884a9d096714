package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/cloudevent"
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
	resp, err := c.send(ctx, api.StartSubject(definition), "start", runID, in, ext)
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
	resp, err := c.send(ctx, subject(runID), kind, nuid.Next(), body, nil)
	if err != nil {
		return "", err
	}
	return resp.RunID, nil
}

// SignalOptions adjust [Client.Signal]. The zero value works.
type SignalOptions struct {
	// DeliveryID deduplicates the signal: a repeated ID with the same name and payload is
	// applied once; with another, Signal returns an error wrapping ErrDeliveryConflict. Empty
	// generates one.
	DeliveryID string
}

// Signal delivers signal name with payload (encoded to JSON) to run runID and returns the ID of
// the run that received it: runID, or, if runID continued as new, the latest run it continued
// as. The signal is in the run's history when Signal returns. opts may be nil.
func (c *Client) Signal(ctx context.Context, runID, name string, payload any, opts *SignalOptions) (string, error) {
	if opts == nil {
		opts = &SignalOptions{}
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
	resp, err := c.send(ctx, api.SignalSubject(runID, name), "signal", deliveryID(opts.DeliveryID), p, nil)
	if err != nil {
		return "", err
	}
	return resp.RunID, nil
}

// DeliverOptions adjust [Client.DeliverHook]. The zero value works.
type DeliverOptions struct {
	// DeliveryID deduplicates the delivery: repeating it with the same payload is accepted once;
	// with another, DeliverHook returns an error wrapping ErrDeliveryConflict. Empty generates
	// one.
	DeliveryID string
}

// DeliverHook delivers payload (encoded to JSON) to the hook whose token is token (see
// [Context.HookToken]) and returns the ID of the run that owns it. A hook takes one delivery:
// another one returns an error wrapping ErrAlreadyReceived; an unknown token ErrNotFound. opts
// may be nil.
func (c *Client) DeliverHook(ctx context.Context, token string, payload any, opts *DeliverOptions) (string, error) {
	if opts == nil {
		opts = &DeliverOptions{}
	}
	p, err := encode(payload)
	if err != nil {
		return "", fmt.Errorf("%w: encoding the hook payload: %w", ErrInvalidInput, err)
	}
	if token == "" || strings.ContainsAny(token, ". \t\r\n*>") {
		return "", fmt.Errorf("%w: hook token %q is not a token Flow issues (use ctx.HookToken's)", ErrInvalidInput, token)
	}
	resp, err := c.send(ctx, api.HookSubject(token), "hook", deliveryID(opts.DeliveryID), p, nil)
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

// inputSource is the ce-source of the client's inputs.
const inputSource = "flow/client"

// Retry bounds of a write: a request that times out (the ingress may have died after the
// commit) is sent again with the same CloudEvents id, which the ingress applies once.
const (
	attemptTimeout = 10 * time.Second
	noIngressFor   = 3 * time.Second
)

// send asks the ingress to apply one input: a CloudEvent written with the SDK's NATS binding,
// with id and data, and extensions. It retries a request that got no answer with the same id.
func (c *Client) send(ctx context.Context, subject, kind, id string, data []byte, ext map[string]string) (*api.InputResponse, error) {
	ev := ce.New()
	ev.SetID(id)
	ev.SetSource(inputSource)
	ev.SetType("dev.flow.input." + kind)
	ev.SetTime(time.Now())
	for k, v := range ext {
		ev.SetExtension(k, v)
	}
	// The caller's span, if any, becomes the parent of the ingress's span for this input: a run
	// started from a traced request joins that request's trace.
	if x := cloudevent.TraceExtension(ctx); x.TraceParent != "" {
		x.AddTracingAttributes(&ev)
	}
	if err := ev.SetData(ce.ApplicationJSON, json.RawMessage(data)); err != nil {
		return nil, err
	}
	var body bytes.Buffer
	h, err := cenats.WriteMsg(ctx, binding.ToMessage(&ev), &body)
	if err != nil {
		return nil, fmt.Errorf("encoding the %s as a CloudEvent: %w", kind, err)
	}
	msg := &nats.Msg{Subject: subject, Header: h, Data: body.Bytes()}
	started := time.Now()
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		reply, err := c.request(actx, msg)
		cancel()
		if err == nil {
			return decodeInputReply(subject, reply)
		}
		if errors.Is(err, ErrPermissionDenied) {
			return nil, err
		}
		noIngress := errors.Is(err, nats.ErrNoResponders)
		if ctx.Err() != nil || noIngress && time.Since(started) > noIngressFor ||
			!noIngress && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			if noIngress {
				return nil, fmt.Errorf("%w on %s: start `flow dev`, or `flowd ingress` beside your NATS server", ErrIngressUnavailable, subject)
			}
			return nil, fmt.Errorf("asking the ingress (%s): %w", subject, errors.Join(err, ctx.Err()))
		}
		c.logger.Debug("retrying an input", "subject", subject, "id", id, "error", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
	}
}

// decodeInputReply reads the ingress's answer: an InputResponse, or an error mapped to the
// sentinel callers branch on.
func decodeInputReply(subject string, m *nats.Msg) (*api.InputResponse, error) {
	if code := m.Header.Get(api.HeaderErrorCode); code != "" {
		var e api.IngressError
		if err := json.Unmarshal(m.Data, &e); err != nil || e.Code == "" {
			e = api.IngressError{Code: api.IngressCode(code), Message: string(m.Data)}
		}
		return nil, inputError(&e)
	}
	var resp api.InputResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("decoding the ingress's reply on %s: %w", subject, err)
	}
	return &resp, nil
}

// inputError maps an ingress error to the sentinel callers branch on; the message says what
// was wrong and what to do.
func inputError(e *api.IngressError) error {
	if err := rateLimitedError(e); err != nil {
		return err
	}
	var sentinel error
	switch e.Code {
	case api.CodeInvalidJSON, api.CodeInvalidName, api.CodeInvalidEvent, api.CodeInvalidRequest, api.CodeTooLarge, api.CodeMediaType:
		sentinel = ErrInvalidInput
	case api.CodeRunNotFound, api.CodeHookNotFound:
		sentinel = ErrNotFound
	case api.CodeRunEnded:
		sentinel = ErrTerminal
	case api.CodeRunExists:
		sentinel = ErrRunExists
	case api.CodeDeliveryConflict:
		sentinel = ErrDeliveryConflict
	case api.CodeHookReceived:
		sentinel = ErrAlreadyReceived
	case api.CodeNoWorker:
		sentinel = ErrNoWorker
	case api.CodeRunDamaged:
		sentinel = ErrDamaged
	case api.CodeRunDeleted:
		sentinel = ErrRunDeleted
	default:
		return e
	}
	return &inputErr{sentinel: sentinel, msg: e.Message}
}

// inputErr is a refused input: its message is the ingress's, and it matches its sentinel.
type inputErr struct {
	sentinel error
	msg      string
}

func (e *inputErr) Error() string { return "flow: " + e.msg }
func (e *inputErr) Unwrap() error { return e.sentinel }
