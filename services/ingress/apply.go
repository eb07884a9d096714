package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// input is one input from outside, as either door decoded it.
type input struct {
	kind api.InputKind
	// definition names the workflow of a start.
	definition string
	// runID is the run of a signal, cancel or terminate, or the requested ID of a start ("" to
	// generate one).
	runID string
	// queue is a start's task queue ("" for the service's).
	queue string
	// name is a signal's name; token a hook's token.
	name, token string
	// deliveryID deduplicates a signal or hook delivery ("" for a fresh one).
	deliveryID string
	// data is a start's input or a signal's or hook's payload: JSON, or nil for null.
	data json.RawMessage
	// reason is a cancel's or terminate's reason.
	reason string
	// attributes are a start's search attributes, JSON values by name, typed by the
	// definition's declarations when the start is applied.
	attributes map[string][]byte
	// payload is the update's or signal's payload of a with-start input (whose data is the
	// start's input): JSON, or nil for null.
	payload json.RawMessage
	// policies are a start's policies (start_policy.go).
	policies api.StartPolicies
	// priority, controlKey and control are a start's priority and flow control (see
	// api.StartRequest).
	priority   int
	controlKey string
	control    *event.FlowControl
	// timeouts are a start's execution and run timeouts (docs/timeouts.md); zero for the
	// definition's defaults.
	timeouts api.RunTimeouts
	// by names who asks for a pause or unpause.
	by string
	// source names the sender, for its rate limit (ratelimit.go): set by the door.
	source string
}

// check validates what can be checked without reading the run: names and JSON.
func (in *input) check() *api.IngressError {
	var err error
	switch in.kind {
	case api.KindStart:
		if err = event.ValidateName("definition", in.definition); err == nil && in.runID != "" {
			err = event.ValidateRunID(in.runID)
		}
		if err == nil && in.queue != "" {
			err = event.ValidateName("queue", in.queue)
		}
	case api.KindSignal:
		if err = event.ValidateDerivedRunID(in.runID); err == nil {
			err = event.ValidateName("signal", in.name)
		}
	case api.KindHook:
		if in.token == "" || strings.ContainsAny(in.token, " \t\r\n*>") || len(in.token) > 256 {
			return &api.IngressError{Code: api.CodeInvalidName, Message: fmt.Sprintf("hook token %q is not a token Flow issues; use the token of ctx.HookToken, or the callback URL the workflow handed out", in.token)}
		}
	case api.KindCancel, api.KindTerminate, api.KindPause, api.KindUnpause:
		err = event.ValidateDerivedRunID(in.runID)
	}
	if err != nil {
		return &api.IngressError{Code: api.CodeInvalidName, Message: err.Error()}
	}
	if len(in.deliveryID) > 256 {
		return &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("delivery ID is %d bytes long; the limit is 256", len(in.deliveryID))}
	}
	if len(in.data) > 0 && !json.Valid(in.data) {
		return &api.IngressError{Code: api.CodeInvalidJSON, Message: "the " + in.dataName() + " is not valid JSON; send a JSON value (a quoted string for text)"}
	}
	return nil
}

func (in *input) dataName() string {
	switch in.kind {
	case api.KindStart:
		return "workflow input"
	case api.KindHook:
		return "hook payload"
	}
	return "signal payload"
}

// apply commits in to its run's history and returns what was committed. Nothing is appended
// when it returns an error.
//
// A valid input is admitted first (ratelimit.go): refused with rate_limited when its sender or
// its run is over its rate, then applied in its run's turn, one input to a run at a time in
// this process.
func (s *Service) apply(ctx context.Context, in *input) (*api.InputResponse, *api.IngressError) {
	check := in.check
	if isWithInput(in.kind) {
		check = in.checkWithInput
	}
	if e := check(); e != nil {
		return nil, e
	}
	release, e := s.admission.admit(ctx, in)
	if e != nil {
		return nil, e
	}
	defer release()
	if isWithInput(in.kind) {
		return s.applyWithInput(ctx, in)
	}
	data := in.data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	if (in.kind == api.KindSignal || in.kind == api.KindHook || isPause(in.kind)) && in.deliveryID == "" {
		in.deliveryID = nuid.Next()
	}
	resp := &api.InputResponse{RunID: in.runID, DeliveryID: in.deliveryID}
	var err error
	switch in.kind {
	case api.KindStart:
		queue := in.queue
		if queue == "" {
			queue = s.cfg.Queue
		}
		def, derr := s.defs.require(ctx, queue, in.definition)
		if derr != nil {
			if derr.Code == api.CodeNoWorker && in.runID != "" {
				if resp, e, ok := s.existingStart(ctx, in, queue, data); ok {
					return resp, e
				}
			}
			return nil, derr
		}
		spec := event.Spec{Definition: in.definition, BuildID: def.BuildID, Patches: def.Patches}
		attrs, aerr := core.TypeAttributes(in.attributes, def.Attributes)
		if aerr != nil {
			return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: trimFlow(aerr)}
		}
		control, cerr := in.flowControl(def.Control, data)
		if cerr != nil {
			return nil, cerr
		}
		resp.RunID, resp.Created, err = s.engine.Start(ctx, in.startParams(engine.StartParams{RunID: in.runID, Spec: spec, Input: data, Queue: queue,
			Attributes: attrs, Priority: in.priority, Control: control, ExecutionTimeout: in.executionTimeout(def.Timeouts),
			RunTimeout: in.runTimeout(def.Timeouts)}))
	case api.KindSignal:
		resp.RunID, err = s.engine.Signal(ctx, in.runID, in.name, data, in.deliveryID)
	case api.KindHook:
		resp.RunID, err = s.engine.DeliverHook(ctx, in.token, data, in.deliveryID)
	case api.KindCancel:
		resp.RunID, err = s.engine.Cancel(ctx, in.runID, in.reason)
	case api.KindTerminate:
		resp.RunID, err = s.engine.Terminate(ctx, in.runID, in.reason)
	case api.KindPause, api.KindUnpause:
		resp.RunID, err = s.applyPause(ctx, in)
	}
	if err != nil {
		if in.kind == api.KindHook && in.runID == "" {
			in.runID = resp.RunID // the hook's run, when its token was found
		}
		return nil, s.refusal(in, err)
	}
	if in.kind != api.KindSignal && in.kind != api.KindHook && !isPause(in.kind) {
		resp.DeliveryID = ""
	}
	return resp, nil
}

// existingStart answers a start of run ID in.runID when no live worker serves its definition:
// a run already started with the same definition, queue and input is returned (a retried
// start), another is refused as taken, and a quarantined one as damaged. ok is false when the
// run does not exist.
func (s *Service) existingStart(ctx context.Context, in *input, queue string, data json.RawMessage) (*api.InputResponse, *api.IngressError, bool) {
	exists, err := s.engine.Existing(ctx, engine.StartParams{RunID: in.runID, Spec: event.Spec{Definition: in.definition}, Input: data, Queue: queue})
	if errors.Is(err, engine.ErrRunExists) && in.policies.OnConflict == event.ConflictUseExisting {
		exists, err = true, nil // whatever its input (start policies)
	}
	switch {
	case err != nil:
		return nil, s.refusal(in, err), true
	case !exists:
		return nil, nil, false
	}
	return &api.InputResponse{RunID: in.runID}, nil, true
}

// refusal maps an engine error to the error the caller gets.
func (s *Service) refusal(in *input, err error) *api.IngressError {
	e := func(code api.IngressCode, format string, args ...any) *api.IngressError {
		return &api.IngressError{Code: code, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case errors.Is(err, core.ErrNotFound) && in.kind == api.KindHook:
		return e(api.CodeHookNotFound, "no hook has token %q: the run never created it, or the token is mistyped; check the callback URL", in.token)
	case errors.Is(err, store.ErrDeleted):
		return e(api.CodeRunDeleted, "%s; it takes no more inputs (`flow runs --include-deleted` lists it)", trimFlow(err))
	case errors.Is(err, core.ErrNotFound):
		if why := s.deleted(in.runID); why != "" { // retention.go
			return e(api.CodeRunDeleted, "%s", why)
		}
		return e(api.CodeRunNotFound, "run %q does not exist; list runs with `flow runs` (or GET /v1/runs on the history service)", in.runID)
	case errors.Is(err, core.ErrDeliveryConflict):
		return e(api.CodeDeliveryConflict, "%s", trimFlow(err))
	case errors.Is(err, core.ErrAlreadyReceived):
		return e(api.CodeHookReceived, "%s; a hook takes one delivery", trimFlow(err))
	case errors.Is(err, core.ErrTerminal) && in.kind == api.KindHook:
		return e(api.CodeRunEnded, "the run of this hook, %q, has ended; it takes no more deliveries (see `flow status %s`)", in.runID, in.runID)
	case errors.Is(err, core.ErrTerminal):
		return e(api.CodeRunEnded, "run %q has ended; it takes no more inputs (see `flow status %s`)", in.runID, in.runID)
	case errors.Is(err, engine.ErrRunExists):
		return e(api.CodeRunExists, "%s", trimFlow(err))
	case errors.Is(err, core.ErrInvalidInput), errors.Is(err, event.ErrInvalidID):
		return e(api.CodeInvalidRequest, "%s", trimFlow(err))
	case errors.Is(err, store.ErrDamaged):
		return e(api.CodeRunDamaged, "%s", trimFlow(err))
	case errors.Is(err, core.ErrInvalidHistory):
		// Damaged, and not quarantined yet: the history service quarantines it when it applies
		// the message that breaks it.
		return e(api.CodeRunDamaged, "the history of run %q is damaged (%s); no input is accepted until an operator releases it "+
			"with `flow resume %s --accept-damage` or ends it with `flow terminate %s`", in.runID, trimFlow(err), in.runID, in.runID)
	case errors.Is(err, engine.ErrTooManyPending):
		return &api.IngressError{Code: api.CodeTooManyPending, Message: trimFlow(err) +
			" (the ingress's limits are FLOW_INGRESS_MAX_PENDING_INPUTS and FLOW_INGRESS_MAX_PENDING_BYTES)", RetryAfter: retryAfterSeconds(pendingRetryAfter)}
	case errors.Is(err, engine.ErrStartKeysUnavailable):
		return e(api.CodeIngressBusy, "%s", trimFlow(err))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return e(api.CodeIngressBusy, "the input could not be committed in time (%v); retry with the same delivery ID", err)
	}
	s.logger.Error("applying an input failed", "kind", in.kind, "run_id", in.runID, "error", err)
	return e(api.CodeIngressInternal, "the input was not committed (%v); retry with the same delivery ID", err)
}

func trimFlow(err error) string { return strings.TrimPrefix(err.Error(), "flow: ") }
