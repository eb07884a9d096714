package flowtest

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/pkg/flow"
)

var _ core.UpdateDecider = runtimeView{}

// DecideUpdate implements core.UpdateDecider: the deployed registry's update handlers.
func (r runtimeView) DecideUpdate(definition string, input json.RawMessage, history *core.Snapshot, u *core.Update, accepted bool) (core.UpdateDecision, error) {
	return r.reg.DecideUpdate(definition, input, history, u, accepted)
}

// Update sends update name with payload to run runID under updateID, drives the run, and returns
// where the update stands then: completed with its result, or still open, or an
// *flow.UpdateError when it was rejected, failed or its run ended first. A repeated update ID
// with the same name and payload is applied once and returns the same outcome.
func (e *Env) Update(ctx context.Context, runID, name string, payload any, updateID string) (*flow.UpdateOutcome, error) {
	p, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encoding the update payload: %w", err)
	}
	to, err := e.eng().Update(ctx, runID, updateID, name, p)
	if err != nil {
		return nil, err
	}
	if err := e.drain(ctx); err != nil {
		return nil, err
	}
	return e.UpdateResult(ctx, to, updateID)
}

// UpdateWithStart starts run opts.RunID of definition with input and the update in one commit,
// or sends the update to the run if it exists (started the same way), drives, and returns
// where the update stands, as Update does.
func (e *Env) UpdateWithStart(ctx context.Context, definition string, input any, opts *StartOptions, name string, payload any, updateID string) (*flow.UpdateOutcome, error) {
	if opts == nil || opts.RunID == "" {
		return nil, fmt.Errorf("%w: UpdateWithStart needs StartOptions.RunID", flow.ErrInvalidInput)
	}
	in, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("encoding the input: %w", err)
	}
	p, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encoding the update payload: %w", err)
	}
	spec, err := e.registry().Spec(definition, in)
	if err != nil {
		return nil, err
	}
	to, _, err := e.eng().UpdateWithStart(ctx, engine.StartParams{RunID: opts.RunID, Spec: spec, Input: in, Queue: opts.Queue}, updateID, name, p)
	if err != nil {
		return nil, err
	}
	if err := e.drain(ctx); err != nil {
		return nil, err
	}
	return e.UpdateResult(ctx, to, updateID)
}

// UpdateResult returns where update updateID of run runID stands, as flow.Client.UpdateResult
// does.
func (e *Env) UpdateResult(ctx context.Context, runID, updateID string) (*flow.UpdateOutcome, error) {
	s, err := e.eng().Snapshot(ctx, runID)
	if err != nil {
		return nil, err
	}
	st, ok := api.StateOfUpdate(s, updateID)
	if !ok {
		return nil, fmt.Errorf("%w: run %q has no update %q", flow.ErrNotFound, runID, updateID)
	}
	o, err := sdk.UpdateOutcomeOf(st)
	if err != nil {
		return nil, err
	}
	return o.(*flow.UpdateOutcome), nil
}
