package flow

import (
	"context"
	"encoding/json"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/pkg/event"
)

// The engine, the worker and the test kit reach a Registry's workflows, steps and options
// through sdk.RuntimeOf(reg), not through exported methods: they are the runtime seam, not the
// SDK's API.
func init() {
	sdk.SetRuntimeOf(func(r any) sdk.Runtime {
		if reg, ok := r.(*Registry); ok && reg != nil {
			return registryRuntime{reg}
		}
		return nil
	})
	sdk.SetUpdateOutcomeOf(func(st *api.UpdateState) (any, error) { return updateOutcomeOf(st) })
	sdk.SetSnapshotView(func(s *core.Snapshot) any { return viewOf(s) })
}

// registryRuntime is a Registry seen as the engine's runtime (sdk.Runtime).
type registryRuntime struct{ r *Registry }

var _ sdk.Runtime = registryRuntime{}

func (rt registryRuntime) Identity(definition string) (core.Identity, error) {
	return rt.r.identity(definition)
}

func (rt registryRuntime) RunWorkflow(definition string, input json.RawMessage, history *core.Snapshot) (core.Decision, error) {
	return rt.r.runWorkflow(definition, input, history)
}

func (rt registryRuntime) DecideUpdate(definition string, input json.RawMessage, history *core.Snapshot, u *core.Update, accepted bool) (core.UpdateDecision, error) {
	return rt.r.decideUpdate(definition, input, history, u, accepted)
}

func (rt registryRuntime) RunStep(ctx context.Context, a core.Attempt) core.StepOutcome {
	return rt.r.runStep(ctx, a)
}

func (rt registryRuntime) BuildID() string              { return rt.r.buildID }
func (rt registryRuntime) Workflows() []string          { return rt.r.workflowNames() }
func (rt registryRuntime) Steps() []string              { return rt.r.stepNames() }
func (rt registryRuntime) StepLimits() bool             { return rt.r.anyStepLimits() }
func (rt registryRuntime) UsePayloads(g payload.Getter) { rt.r.usePayloads(g) }
func (rt registryRuntime) Replaying() sdk.Runtime       { return registryRuntime{rt.r.replayingView()} }

func (rt registryRuntime) Spec(definition string, input json.RawMessage) (event.Spec, error) {
	return rt.r.spec(definition, input)
}

func (rt registryRuntime) StartAttributes(definition string, attrs map[string]any) (event.Attributes, error) {
	return rt.r.startAttributes(definition, attrs)
}

func (rt registryRuntime) FlowControl(definition string) *event.FlowControl {
	return rt.r.flowControl(definition)
}

func (rt registryRuntime) RunTimeouts(definition string) *event.RunTimeouts {
	return rt.r.runTimeouts(definition)
}

func (rt registryRuntime) Retention(definition string) time.Duration {
	return rt.r.retention(definition)
}

func (rt registryRuntime) StepLimit(name string) (core.StepLimit, bool) { return rt.r.stepLimit(name) }

func (rt registryRuntime) Queries(definition string) []string { return rt.r.queryNames(definition) }

func (rt registryRuntime) Query(s *core.Snapshot, name string, args json.RawMessage) (json.RawMessage, error) {
	return rt.r.query(s, name, args)
}
