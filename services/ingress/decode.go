package ingress

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"strings"

	ce "github.com/cloudevents/sdk-go/v2/event"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
)

// fromEvent fills in from a CloudEvent that either door read with the SDK's binding: its id is
// the delivery ID and its data the input, payload or CancelRequest (see internal/api).
func fromEvent(in *input, ev *ce.Event) *api.IngressError {
	if e := checkUTF8(ev.Data(), "the CloudEvent's data"); e != nil {
		return e
	}
	if err := ev.Validate(); err != nil {
		return &api.IngressError{Code: api.CodeInvalidEvent, Message: fmt.Sprintf("the CloudEvent is invalid: %v; send specversion 1.0, id, source and type", err)}
	}
	if ct := ev.DataContentType(); !jsonMediaType(ct) {
		return &api.IngressError{Code: api.CodeMediaType, Message: fmt.Sprintf("the CloudEvent's datacontenttype is %q; Flow takes JSON data (application/json)", ct)}
	}
	in.deliveryID = ev.ID()
	data := ev.Data()
	switch in.kind {
	case api.KindStart:
		in.data = data
		in.runID = extension(ev, api.ExtRunID)
		if in.runID == "" {
			in.runID = runIDOf(ev.Source(), ev.ID())
		}
		in.queue = extension(ev, api.ExtQueue)
		if raw := extension(ev, api.ExtAttributes); raw != "" {
			var attrs map[string]json.RawMessage
			if err := json.Unmarshal([]byte(raw), &attrs); err != nil {
				return &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("the CloudEvent extension %s is not a JSON object of search attributes (%v); send e.g. {\"customer\": \"c-42\"}", api.ExtAttributes, err)}
			}
			in.setAttributes(attrs)
		}
		if e := in.policiesOf(ev); e != nil {
			return e
		}
		if e := in.controlExtensions(ev); e != nil {
			return e
		}
		if e := in.timeoutExtensions(ev); e != nil {
			return e
		}
	case api.KindSignal, api.KindHook, api.KindUpdate:
		in.data = data
	case api.KindUpdateWithStart, api.KindSignalWithStart:
		return in.withStartBody(data)
	case api.KindCancel, api.KindTerminate:
		return in.cancelBody(data)
	case api.KindPause, api.KindUnpause:
		return in.pauseBody(data)
	}
	return nil
}

// runIDOf derives the run ID of a start that names none from its delivery ID (a CloudEvent's
// id, from source; an Idempotency-Key): the ID itself when it is a valid run ID, else "ce-" and
// a digest of source and ID, so that a redelivered start starts the same run.
func runIDOf(source, id string) string {
	if event.ValidateRunID(id) == nil {
		return id
	}
	sum := sha256.Sum256([]byte(source + "\x00" + id))
	return "ce-" + hex.EncodeToString(sum[:16])
}

func extension(ev *ce.Event, name string) string {
	v, ok := ev.Extensions()[name]
	if !ok {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// fromPlain fills in from a plain JSON body, whose delivery ID (signals and hooks) is
// deliveryID ("" for a fresh one).
func fromPlain(in *input, body []byte, deliveryID string) *api.IngressError {
	if e := checkUTF8(body, "the body"); e != nil {
		return e
	}
	in.deliveryID = deliveryID
	switch in.kind {
	case api.KindStart:
		var req api.StartRequest
		if e := strictJSON(body, &req, `a start's body is {"run_id": "...", "queue": "...", "input": ..., "attributes": {"name": value}, and the start policies (docs/start-policies.md)}, every field optional`); e != nil {
			return e
		}
		in.runID, in.queue, in.data = req.RunID, req.Queue, req.Input
		in.setAttributes(req.Attributes)
		in.policies = req.Policies()
		if in.policies.RequestID == "" {
			in.policies.RequestID = deliveryID
		}
		in.priority, in.controlKey, in.control = req.Priority, req.ControlKey, req.Control
		in.timeouts = api.RunTimeouts{Execution: req.ExecutionTimeout, Run: req.RunTimeout}
		if in.runID == "" && deliveryID != "" {
			in.runID = runIDOf("", deliveryID)
		}
	case api.KindSignal, api.KindHook, api.KindUpdate:
		in.data = body
	case api.KindUpdateWithStart, api.KindSignalWithStart:
		return in.withStartBody(body)
	case api.KindCancel, api.KindTerminate:
		return in.cancelBody(body)
	case api.KindPause, api.KindUnpause:
		return in.pauseBody(body)
	}
	return nil
}

func (in *input) cancelBody(body []byte) *api.IngressError {
	var req api.CancelRequest
	if e := strictJSON(body, &req, `the body of a `+string(in.kind)+` is {"reason": "..."} or empty`); e != nil {
		return e
	}
	in.reason = req.Reason
	return nil
}

// strictJSON decodes body (empty means the zero value) into v, refusing unknown fields.
func strictJSON(body []byte, v any, shape string) *api.IngressError {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if e := checkUTF8(body, "the body"); e != nil {
		return e
	}
	if !json.Valid(body) {
		return &api.IngressError{Code: api.CodeInvalidJSON, Message: "the body is not valid JSON; " + shape}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("the body does not match: %v; %s", err, shape)}
	}
	return nil
}

// jsonMediaType reports whether a content type is JSON: empty, application/json, text/json or
// a +json suffix.
func jsonMediaType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json") && mt != cloudEventsBatch
}

const (
	cloudEventsJSON  = "application/cloudevents+json"
	cloudEventsBatch = "application/cloudevents-batch+json"
)

// setAttributes keeps a start's search attributes, JSON values by name.
func (in *input) setAttributes(attrs map[string]json.RawMessage) {
	if len(attrs) == 0 {
		return
	}
	in.attributes = make(map[string][]byte, len(attrs))
	for k, v := range attrs {
		in.attributes[k] = v
	}
}

// checkKeyName refuses a definition or queue name (kind) that cannot name a key of a NATS
// key-value bucket, such as its pause in FLOW_PAUSES.
func checkKeyName(kind, name string) *api.IngressError {
	if err := event.ValidateName(kind, name); err != nil {
		return &api.IngressError{Code: api.CodeInvalidName, Message: trimFlow(err)}
	}
	for _, r := range name {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '/' || r == '=') {
			return &api.IngressError{Code: api.CodeInvalidName, Message: fmt.Sprintf("%s name %q has %q, which a key of a NATS key-value bucket cannot hold; a %s that is paused must be named with letters a-z and A-Z, digits, '-', '_', '/' and '=' only", kind, name, r, kind)}
		}
	}
	return nil
}
