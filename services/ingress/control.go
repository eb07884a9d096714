package ingress

import (
	"encoding/json"
	"fmt"
	"strconv"

	ce "github.com/cloudevents/sdk-go/v2/event"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/pkg/event"
)

// controlExtensions reads a start's priority and flow control from its CloudEvent's extensions.
func (in *input) controlExtensions(ev *ce.Event) *api.IngressError {
	if p := extension(ev, api.ExtPriority); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("extension %s is %q; a priority is an integer", api.ExtPriority, p)}
		}
		in.priority = n
	}
	in.controlKey = extension(ev, api.ExtControlKey)
	if c := extension(ev, api.ExtControl); c != "" {
		in.control = &event.FlowControl{}
		if err := json.Unmarshal([]byte(c), in.control); err != nil {
			return &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("extension %s is not the JSON of a flow control: %v", api.ExtControl, err)}
		}
	}
	return nil
}

// flowControl resolves the flow control a start's run records from the definition's (registered,
// nil for none) and the start's own, reading the key from data.
func (in *input) flowControl(registered *event.FlowControl, data json.RawMessage) (*event.FlowControl, *api.IngressError) {
	atStart := in.control
	if in.controlKey != "" {
		if atStart == nil {
			atStart = &event.FlowControl{}
		} else {
			c := *atStart
			atStart = &c
		}
		atStart.Key = in.controlKey
	}
	c, err := limits.Resolve(in.definition, registered, atStart, data)
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: trimFlow(err)}
	}
	return c, nil
}
