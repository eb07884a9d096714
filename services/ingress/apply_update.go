package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/pkg/event"
)

// The update doors (docs/updates.md): an update to a run, and the starts that carry an input
// (update-with-start, signal-with-start), which commit run.started and the input at once.

// isWithInput reports whether kind is an update or a start with an input, which applyUpdate
// takes.
func isWithInput(kind api.InputKind) bool {
	return kind == api.KindUpdate || kind == api.KindUpdateWithStart || kind == api.KindSignalWithStart
}

// parseUpdateSubject reads the names of an update subject (<run>.<name>) or a with-start
// subject (<definition>.<name>).
func (in *input) parseUpdateSubject(subject, rest string) *api.IngressError {
	first, name, ok := strings.Cut(rest, ".")
	if !ok {
		shape := "flow.ingress.update.<run>.<name>"
		if in.kind != api.KindUpdate {
			shape = "flow.ingress." + string(in.kind) + ".<definition>.<name>"
		}
		return &api.IngressError{Code: api.CodeInvalidName, Message: fmt.Sprintf("subject %q names no %s; use %s", subject, in.inputName(), shape)}
	}
	in.name = name
	if in.kind == api.KindUpdate {
		in.runID = first
	} else {
		in.definition = first
	}
	return nil
}

// inputName is what the input delivers: an update or a signal.
func (in *input) inputName() string {
	if in.kind == api.KindSignalWithStart {
		return "signal"
	}
	return "update"
}

// withStartBody reads the WithStartRequest body of a with-start input.
func (in *input) withStartBody(body []byte) *api.IngressError {
	var req api.WithStartRequest
	if e := strictJSON(body, &req, `the body of a `+string(in.kind)+` is {"run_id": "...", "queue": "...", "input": ..., "payload": ..., "update_id": "...", "attributes": {"name": value}}, run_id required`); e != nil {
		return e
	}
	in.runID, in.queue, in.data, in.payload = req.RunID, req.Queue, req.Input, req.Payload
	in.setAttributes(req.Attributes)
	if req.UpdateID != "" {
		in.deliveryID = req.UpdateID
	}
	return nil
}

// checkWithInput validates what can be checked of an update or with-start input without
// reading the run.
func (in *input) checkWithInput() *api.IngressError {
	bad := func(code api.IngressCode, format string, args ...any) *api.IngressError {
		return &api.IngressError{Code: code, Message: fmt.Sprintf(format, args...)}
	}
	var err error
	if in.kind == api.KindUpdate {
		err = event.ValidateDerivedRunID(in.runID)
	} else {
		if in.runID == "" {
			return bad(api.CodeInvalidRequest, "a %s needs run_id in its body: a retry must find the run its first attempt started", in.kind)
		}
		if err = event.ValidateName("definition", in.definition); err == nil {
			err = event.ValidateRunID(in.runID)
		}
		if err == nil && in.queue != "" {
			err = event.ValidateName("queue", in.queue)
		}
	}
	if err == nil {
		err = event.ValidateName(in.inputName(), in.name)
	}
	if err == nil && in.deliveryID != "" && in.kind != api.KindSignalWithStart {
		err = event.ValidateUpdateID(in.deliveryID)
	}
	if err != nil {
		return bad(api.CodeInvalidName, "%v", err)
	}
	if len(in.deliveryID) > 256 {
		return bad(api.CodeInvalidRequest, "delivery ID is %d bytes long; the limit is 256", len(in.deliveryID))
	}
	dataName := "workflow input"
	if in.kind == api.KindUpdate {
		dataName = fmt.Sprintf("input of update %q", in.name) // an update's body is its input
	}
	for what, v := range map[string]json.RawMessage{dataName: in.data, in.inputName() + " payload": in.payload} {
		if len(v) > 0 && !json.Valid(v) {
			return bad(api.CodeInvalidJSON, "the %s is not valid JSON; send a JSON value (a quoted string for text)", what)
		}
	}
	return nil
}

// applyWithInput commits an update or a with-start input, which apply checked
// (checkWithInput). The response's DeliveryID is the update ID (or the signal's delivery ID).
func (s *Service) applyWithInput(ctx context.Context, in *input) (*api.InputResponse, *api.IngressError) {
	if in.deliveryID == "" {
		in.deliveryID = nuid.Next()
	}
	orNull := func(v json.RawMessage) json.RawMessage {
		if len(v) == 0 {
			return json.RawMessage("null")
		}
		return v
	}
	resp := &api.InputResponse{RunID: in.runID, DeliveryID: in.deliveryID}
	var err error
	if in.kind == api.KindUpdate {
		resp.RunID, err = s.engine.Update(ctx, in.runID, in.deliveryID, in.name, orNull(in.data))
	} else {
		queue := in.queue
		if queue == "" {
			queue = s.cfg.Queue
		}
		def, derr := s.defs.require(ctx, queue, in.definition)
		if derr != nil {
			// No live worker could start the run; one that exists (started the same way) still
			// takes the input, as a signal or an update to it would.
			if derr.Code != api.CodeNoWorker {
				return nil, derr
			}
			return s.existingWithInput(ctx, in, queue, orNull(in.data), orNull(in.payload), derr)
		}
		attrs, aerr := core.TypeAttributes(in.attributes, def.Attributes)
		if aerr != nil {
			return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: trimFlow(aerr)}
		}
		// A run started with an input is under its definition's flow control as any other start.
		control, cerr := in.flowControl(def.Control, orNull(in.data))
		if cerr != nil {
			return nil, cerr
		}
		p := engine.StartParams{RunID: in.runID, Spec: event.Spec{Definition: in.definition, BuildID: def.BuildID, Patches: def.Patches},
			Input: orNull(in.data), Queue: queue, Attributes: attrs, Priority: in.priority, Control: control,
			ExecutionTimeout: in.executionTimeout(def.Timeouts), RunTimeout: in.runTimeout(def.Timeouts)}
		if in.kind == api.KindUpdateWithStart {
			resp.RunID, resp.Created, err = s.engine.UpdateWithStart(ctx, p, in.deliveryID, in.name, orNull(in.payload))
		} else {
			resp.RunID, resp.Created, err = s.engine.SignalWithStart(ctx, p, in.name, orNull(in.payload), in.deliveryID)
		}
	}
	if err != nil {
		return nil, s.refusal(in, err)
	}
	return resp, nil
}

// existingWithInput delivers a with-start input to run in.runID when no live worker serves its
// definition: the run must exist, started with the same definition, input and queue; else the
// caller gets noWorker (the run does not exist) or why the start differs.
func (s *Service) existingWithInput(ctx context.Context, in *input, queue string, data, payload json.RawMessage, noWorker *api.IngressError) (*api.InputResponse, *api.IngressError) {
	exists, err := s.engine.Existing(ctx, engine.StartParams{RunID: in.runID, Spec: event.Spec{Definition: in.definition}, Input: data, Queue: queue})
	switch {
	case err != nil:
		return nil, s.refusal(in, err)
	case !exists:
		return nil, noWorker
	}
	resp := &api.InputResponse{RunID: in.runID, DeliveryID: in.deliveryID}
	if in.kind == api.KindUpdateWithStart {
		resp.RunID, err = s.engine.Update(ctx, in.runID, in.deliveryID, in.name, payload)
	} else {
		resp.RunID, err = s.engine.Signal(ctx, in.runID, in.name, payload, in.deliveryID)
	}
	if err != nil {
		return nil, s.refusal(in, err)
	}
	return resp, nil
}

// updateState asks the history service where update updateID of run runID stands, waiting up to
// wait for it to settle.
func (s *Service) updateState(ctx context.Context, runID, updateID string, wait time.Duration) (*api.UpdateState, *api.IngressError) {
	body, err := json.Marshal(api.UpdateRequest{RunID: runID, UpdateID: updateID, Wait: wait})
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeIngressInternal, Message: err.Error()}
	}
	rctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
	defer cancel()
	m, err := s.nc.RequestWithContext(rctx, api.SubjectUpdate, body)
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("the history service did not answer for update %q of run %q (%v); ask again with GET /v1/runs/%s/updates/%s", updateID, runID, err, runID, updateID)}
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		msg := m.Header.Get("Nats-Service-Error")
		if code == string(api.CodeNotFound) {
			return nil, &api.IngressError{Code: api.CodeRunNotFound, Message: msg}
		}
		if code == string(api.CodeInvalid) {
			return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: msg}
		}
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: "the history service: " + msg}
	}
	var st api.UpdateState
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return nil, &api.IngressError{Code: api.CodeIngressInternal, Message: fmt.Sprintf("decoding the history service's answer: %v", err)}
	}
	return &st, nil
}
