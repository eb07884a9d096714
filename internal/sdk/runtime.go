package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/pkg/event"
)

// Runtime is what the engine, the worker, the test kit (pkg/flowtest) and the tools need of a
// registry of workflow code (a *flow.Registry), which pkg/flow does not export: the engine's
// runtime seam (core.Decider, core.UpdateDecider, RunStep) and the registrations' options.
// A Runtime is safe for concurrent use once its registry's registrations are done.
type Runtime interface {
	core.Decider
	core.UpdateDecider
	// RunStep runs one attempt of a step, recovering a panic into a retryable error. It must
	// return (not panic) when ctx is cancelled.
	RunStep(ctx context.Context, a core.Attempt) core.StepOutcome
	// BuildID is the registry's build ID ("" for none).
	BuildID() string
	// Workflows and Steps return the registered workflow and step names, sorted.
	Workflows() []string
	Steps() []string
	// Spec returns the spec a new run of definition records (its name, the build ID, the
	// declared patch markers), after checking that input decodes into the workflow's input
	// type: an error wraps core.ErrInvalidInput, or core.ErrNotFound for an unknown definition.
	Spec(definition string, input json.RawMessage) (event.Spec, error)
	// StartAttributes types the search attributes a new run of definition starts with, by the
	// definition's declarations.
	StartAttributes(definition string, attrs map[string]any) (event.Attributes, error)
	// FlowControl returns the flow control new runs of definition start under; nil for none.
	FlowControl(definition string) *event.FlowControl
	// RunTimeouts returns the default run timeouts of new runs of definition; nil for none.
	RunTimeouts(definition string) *event.RunTimeouts
	// Retention returns how long definition's ended runs are kept; 0 for the default.
	Retention(definition string) time.Duration
	// StepLimit returns the limit of step name, if one is set; StepLimits reports whether any
	// step is limited.
	StepLimit(name string) (core.StepLimit, bool)
	StepLimits() bool
	// Queries returns the query names definition handles, sorted.
	Queries(definition string) []string
	// Query answers query name of the run s projects, with args (JSON).
	Query(s *core.Snapshot, name string, args json.RawMessage) (json.RawMessage, error)
	// UsePayloads makes workflow code read offloaded payloads from g.
	UsePayloads(g payload.Getter)
	// Replaying returns a view whose workflows see IsReplaying true and log nothing.
	Replaying() Runtime
}

// runtimeOf is the hook pkg/flow sets in its init: it returns the Runtime of a *flow.Registry,
// or nil for anything else.
var runtimeOf atomic.Pointer[func(any) Runtime]

// SetRuntimeOf installs the function RuntimeOf calls. pkg/flow calls it in its init; nothing
// else should.
func SetRuntimeOf(f func(any) Runtime) { runtimeOf.Store(&f) }

// RuntimeOf returns the Runtime of registry, a *flow.Registry. It panics when registry is not
// one (or nil), a programming error.
func RuntimeOf(registry any) Runtime {
	f := runtimeOf.Load()
	if f == nil {
		panic("sdk: RuntimeOf: pkg/flow is not linked into this program")
	}
	rt := (*f)(registry)
	if rt == nil {
		panic(fmt.Sprintf("sdk: RuntimeOf: %T is not a non-nil *flow.Registry", registry))
	}
	return rt
}
