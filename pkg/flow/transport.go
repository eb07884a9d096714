package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/cloudevent"
)

// transport is the client's one path to Flow's services over NATS request/reply: every request
// of a Client and of its sub-clients (Schedules, Batches, Pauses, ...) is sent by do, and every
// reply is decoded by decodeReply, which turns the services' error replies into Flow's sentinels
// and typed errors. It holds no state of its own beyond the connection, and is safe for
// concurrent use.
type transport struct {
	nc *nats.Conn
	// perms ends the requests the server refuses for lack of permission (permissions.go).
	perms  *permWatch
	logger *slog.Logger
}

// service is who answers a request, which decides how its failures and error replies read.
type service uint8

const (
	// ingress applies writes: inputs, resets, pauses, schedules and batch jobs. Its error
	// replies are an api.IngressError, with its code in the api.HeaderErrorCode header (the
	// batch API: api.HeaderBatchError).
	ingress service = iota
	// history answers reads. Its error replies carry a micro error code (api.Code) and message.
	history
	// worker answers workflow queries. Its error replies are an api.QueryError, with a micro
	// error code; decodeReply returns it as is, for the query's caller to read with the
	// query's names (queryReplyError).
	worker
)

func (s service) String() string {
	switch s {
	case ingress:
		return "ingress"
	case history:
		return "history service"
	}
	return "worker"
}

// Timeouts of requests.
const (
	// attemptTimeout bounds one attempt of a retried request: a request that times out (the
	// ingress may have died after the commit) is sent again as is, which the ingress applies
	// once.
	attemptTimeout = 10 * time.Second
	// noIngressFor is how long a retried request waits for an ingress to answer at all.
	noIngressFor = 3 * time.Second
	// callTimeout bounds a request that is not retried, when its context has no deadline.
	callTimeout = 30 * time.Second
)

// call is one request: where it goes and how it may be sent.
type call struct {
	to      service
	subject string
	// header is sent with the request (a CloudEvent's attributes, a content type); nil for none.
	header nats.Header
	// retry sends the request again, with backoff, while no service answers it (for
	// noIngressFor) or its attempts time out (until ctx ends). Only for requests that the
	// service applies once however often they arrive, and that take less than attemptTimeout.
	// A request that is not retried is sent once, bounded by ctx or else by callTimeout.
	// Neither a refusal for lack of permission nor an error reply (a rate limit among them:
	// the caller decides whether to wait its RetryAfter) is retried.
	retry bool
}

// do sends data as c and returns the reply, which may be an error reply (decodeReply reads it).
// A request no service answers returns an error wrapping ErrIngressUnavailable or
// ErrHistoryUnavailable (for a worker, nats.ErrNoResponders); a refused one a *PermissionError.
func (t *transport) do(ctx context.Context, c call, data []byte) (*nats.Msg, error) {
	msg := &nats.Msg{Subject: c.subject, Header: c.header, Data: data}
	if !c.retry {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, callTimeout)
			defer cancel()
		}
		reply, err := t.request(ctx, msg)
		if err != nil {
			return nil, c.failed(err)
		}
		return reply, nil
	}
	started := time.Now()
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		reply, err := t.request(actx, msg)
		cancel()
		if err == nil {
			return reply, nil
		}
		if errors.Is(err, ErrPermissionDenied) {
			return nil, err
		}
		noAnswer := errors.Is(err, nats.ErrNoResponders)
		if ctx.Err() != nil || noAnswer && time.Since(started) > noIngressFor ||
			!noAnswer && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			return nil, c.failed(errors.Join(err, ctx.Err()))
		}
		t.logger.Debug("retrying a request", "subject", c.subject, "error", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
	}
}

// failed returns the error of c's request that got no reply.
func (c call) failed(err error) error {
	if errors.Is(err, ErrPermissionDenied) {
		return err
	}
	if errors.Is(err, nats.ErrNoResponders) {
		switch c.to {
		case ingress:
			return fmt.Errorf("%w on %s: start `flow dev`, or `flowd ingress` beside your NATS server", ErrIngressUnavailable, c.subject)
		case history:
			return fmt.Errorf("%w on %s: start `flow dev`, or `flowd history` beside your NATS server", ErrHistoryUnavailable, c.subject)
		}
		return err
	}
	if c.to == worker {
		return err
	}
	return fmt.Errorf("asking the %s (%s): %w", c.to, c.subject, err)
}

// json sends req, encoded to JSON, as c and decodes the reply into resp (nil discards it).
func (t *transport) json(ctx context.Context, c call, req, resp any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	reply, err := t.do(ctx, c, data)
	if err != nil {
		return err
	}
	return c.decodeReply(reply, resp)
}

// decodeReply decodes reply m to c into resp (nil discards it), or returns the error an error
// reply stands for (replyError).
func (c call) decodeReply(m *nats.Msg, resp any) error {
	if err := replyError(c.to, m); err != nil {
		return err
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(m.Data, resp); err != nil {
		return fmt.Errorf("decoding the %s's reply on %s: %w", c.to, c.subject, err)
	}
	return nil
}

// replyError returns the error that m, a reply of service to, stands for, or nil when m is not
// an error reply. It is the client's one decoder of error replies: an ingress error maps to the
// sentinel callers branch on (ingressError), a history service error to ErrNotFound,
// ErrInvalidInput, ErrDamaged or ErrRunDeleted, and a worker's query error is returned as its
// *api.QueryError.
func replyError(to service, m *nats.Msg) error {
	switch to {
	case ingress:
		code := m.Header.Get(api.HeaderErrorCode)
		if code == "" {
			code = m.Header.Get(api.HeaderBatchError)
		}
		if code == "" {
			return nil
		}
		var e api.IngressError
		if err := json.Unmarshal(m.Data, &e); err != nil || e.Code == "" {
			e = api.IngressError{Code: api.IngressCode(code), Message: string(m.Data)}
		}
		return ingressError(&e)
	case history:
		code := m.Header.Get(micro.ErrorCodeHeader)
		if code == "" {
			return nil
		}
		message := m.Header.Get(micro.ErrorHeader)
		switch api.Code(code) {
		case api.CodeNotFound:
			return fmt.Errorf("%w: %s", ErrNotFound, message)
		case api.CodeInvalid:
			return fmt.Errorf("%w: %s", ErrInvalidInput, message)
		case api.CodeDamaged:
			return fmt.Errorf("%w: %s", ErrDamaged, message)
		case api.CodeDeleted:
			return fmt.Errorf("%w: %s", ErrRunDeleted, message)
		}
		return &api.Error{Code: api.Code(code), Message: message}
	}
	code := m.Header.Get(micro.ErrorCodeHeader)
	if code == "" {
		return nil
	}
	var qe api.QueryError
	if json.Unmarshal(m.Data, &qe) != nil || qe.Code == "" {
		qe = api.QueryError{Code: api.QueryInternal, Message: m.Header.Get(micro.ErrorHeader)}
	}
	return &qe
}

// ingressSentinels maps the ingress's error codes to the sentinels callers branch on.
var ingressSentinels = map[api.IngressCode]error{
	api.CodeInvalidJSON:      ErrInvalidInput,
	api.CodeInvalidName:      ErrInvalidInput,
	api.CodeInvalidEvent:     ErrInvalidInput,
	api.CodeInvalidRequest:   ErrInvalidInput,
	api.CodeTooLarge:         ErrInvalidInput,
	api.CodeMediaType:        ErrInvalidInput,
	api.CodeRunNotFound:      ErrNotFound,
	api.CodeHookNotFound:     ErrNotFound,
	api.CodeRunEnded:         ErrTerminal,
	api.CodeRunExists:        ErrRunExists,
	api.CodeDeliveryConflict: ErrDeliveryConflict,
	api.CodeHookReceived:     ErrAlreadyReceived,
	api.CodeNoWorker:         ErrNoWorker,
	api.CodeRunDamaged:       ErrDamaged,
	api.CodeRunDeleted:       ErrRunDeleted,
	api.CodeScheduleNotFound: ErrScheduleNotFound,
	api.CodeScheduleExists:   ErrScheduleExists,
}

// ingressError maps an ingress error to the sentinel callers branch on (a rate limit to a
// *RateLimitedError); the message says what was wrong and what to do. A code without a
// sentinel is e itself.
func ingressError(e *api.IngressError) error {
	if err := rateLimitedError(e); err != nil {
		return err
	}
	switch e.Code {
	case api.CodeBatchNotFound:
		return fmt.Errorf("%w: %s", ErrBatchNotFound, e.Message)
	case api.CodeBatchExists:
		return fmt.Errorf("%w: %s", ErrBatchExists, e.Message)
	}
	if sentinel, ok := ingressSentinels[e.Code]; ok {
		return &inputErr{sentinel: sentinel, msg: e.Message}
	}
	return e
}

// inputErr is a refused input: its message is the ingress's, and it matches its sentinel.
type inputErr struct {
	sentinel error
	msg      string
}

func (e *inputErr) Error() string { return "flow: " + e.msg }
func (e *inputErr) Unwrap() error { return e.sentinel }

// inputSource is the ce-source of the client's inputs.
const inputSource = "flow/client"

// input asks the ingress to apply one input: a CloudEvent written with the SDK's NATS binding,
// with id, kind and data, and extensions ext. The caller's span, if any, becomes the parent of
// the ingress's span for this input. The request is retried with the same id, which the ingress
// applies once.
func (t *transport) input(ctx context.Context, subject, kind, id string, data []byte, ext map[string]string) (*api.InputResponse, error) {
	ev := ce.New()
	ev.SetID(id)
	ev.SetSource(inputSource)
	ev.SetType("dev.flow.input." + kind)
	ev.SetTime(time.Now())
	for k, v := range ext {
		ev.SetExtension(k, v)
	}
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
	c := call{to: ingress, subject: subject, header: h, retry: true}
	reply, err := t.do(ctx, c, body.Bytes())
	if err != nil {
		return nil, err
	}
	var resp api.InputResponse
	if err := c.decodeReply(reply, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// query sends req to the history service on subject and decodes the reply into resp.
func (c *Client) query(ctx context.Context, subject string, req, resp any) error {
	return c.t.json(ctx, call{to: history, subject: subject}, req, resp)
}
