package ingress

import (
	"fmt"
	"time"

	ce "github.com/cloudevents/sdk-go/v2/event"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
)

// timeoutExtensions reads a start's execution and run timeouts from its CloudEvent's extensions
// (api.ExtExecutionTimeout, api.ExtRunTimeout), Go durations.
func (in *input) timeoutExtensions(ev *ce.Event) *api.IngressError {
	for _, f := range []struct {
		ext string
		to  *event.Duration
	}{{api.ExtExecutionTimeout, &in.timeouts.Execution}, {api.ExtRunTimeout, &in.timeouts.Run}} {
		v := extension(ev, f.ext)
		if v == "" {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("CloudEvents extension %s is %q, not a positive duration; give one such as 30s or 1h", f.ext, v)}
		}
		*f.to = event.Duration(d)
	}
	return nil
}

// executionTimeout is the start's execution timeout, else the definition's default (def, nil
// for none).
func (in *input) executionTimeout(def *event.RunTimeouts) time.Duration {
	if in.timeouts.Execution != 0 || def == nil {
		return time.Duration(in.timeouts.Execution)
	}
	return time.Duration(def.Execution)
}

// runTimeout is the start's run timeout, else the definition's default.
func (in *input) runTimeout(def *event.RunTimeouts) time.Duration {
	if in.timeouts.Run != 0 || def == nil {
		return time.Duration(in.timeouts.Run)
	}
	return time.Duration(def.Run)
}
