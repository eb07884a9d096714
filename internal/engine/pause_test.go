package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/pauses"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/pkg/flow"
)

// memPauses is an in-memory engine.Pauses.
type memPauses struct {
	mu sync.Mutex
	m  map[string]pauses.Pause
}

func (p *memPauses) Held(definition, queue string) (pauses.Pause, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[pauses.Key(pauses.ScopeDefinition, definition)]; ok {
		return e, true
	}
	if queue == "" {
		queue = streams.DefaultQueue
	}
	e, ok := p.m[pauses.Key(pauses.ScopeQueue, queue)]
	return e, ok
}

func (p *memPauses) Put(_ context.Context, e pauses.Pause) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[e.Key()] = e
	return nil
}

func (p *memPauses) Delete(_ context.Context, scope, name string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.m[pauses.Key(scope, name)]
	delete(p.m, pauses.Key(scope, name))
	return ok, nil
}

func (p *memPauses) List(context.Context) ([]pauses.Pause, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pauses.Pause
	for _, e := range p.m {
		out = append(out, e)
	}
	return out, nil
}

// countedStepSetup is a bundle whose workflow "w" runs step "s" (step "work") and completes
// with its output; ran counts the attempts of "work".
func countedStepSetup(t *testing.T) (b *testBundle, ran *atomic.Int32) {
	t.Helper()
	ran = new(atomic.Int32)
	b = setup(t, func(reg *flow.Registry) {
		flow.RegisterStep(reg, "work", func(context.Context, json.RawMessage) (int, error) { return int(ran.Add(1)), nil })
		flow.RegisterWorkflow(reg, "w", func(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
			if out := ctx.StepOutput("s"); out != nil {
				return ctx.Complete(out), nil
			}
			return ctx.ScheduleStep("s", "work", nil), nil
		})
	})
	return b, ran
}

// TestDrivePausedRun: a paused run's drive makes no decision and starts no attempt; Unpause
// appends run.unpaused and the next drive runs the held attempt.
func TestDrivePausedRun(t *testing.T) {
	t.Parallel()
	b, ran := countedStepSetup(t)
	e := b.engine(t, 4)
	runID := b.start(t, e, "w")
	ctx := engine.WithActor(t.Context(), "ann")
	to, err := e.Pause(ctx, runID, "hold", "p-1")
	require.NoError(t, err)
	require.Equal(t, runID, to)
	res, err := e.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusPaused, res.Status)
	require.Contains(t, res.WaitingOn, "unpause")
	require.Zero(t, ran.Load())
	require.Len(t, b.history(t, runID), 2, "run.started, run.paused")

	_, err = e.Unpause(ctx, runID, "go", "u-1")
	require.NoError(t, err)
	_, err = e.Unpause(ctx, runID, "go", "u-1")
	require.NoError(t, err, "a repeated request is accepted without effect")
	res, err = e.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.Equal(t, int32(1), ran.Load())
	s, err := e.Snapshot(t.Context(), runID)
	require.NoError(t, err)
	require.Equal(t, 1, s.Pauses)
}

// TestDriveHeldDefinition: a drive of a run whose definition is paused stops with a HeldError
// before deciding; once the pause is gone the run goes on.
func TestDriveHeldDefinition(t *testing.T) {
	t.Parallel()
	b, ran := countedStepSetup(t)
	pauses := &memPauses{m: map[string]pauses.Pause{}}
	e, err := engine.New(engine.Config{Store: b.store, Runtime: sdk.RuntimeOf(b.reg), Host: b.host, Pauses: pauses})
	require.NoError(t, err)
	_, err = e.PauseDefinition(engine.WithActor(t.Context(), "ops"), "w", "bad deploy")
	require.NoError(t, err)
	runID := b.start(t, e, "w")
	_, err = e.Drive(t.Context(), runID, 0)
	var held *engine.HeldError
	require.True(t, errors.As(err, &held), "%v", err)
	require.Equal(t, "definition.w", held.Pause.Key())
	require.Equal(t, "ops", held.Pause.By)
	require.Len(t, b.history(t, runID), 1, "no decision while the definition is paused")
	list, err := e.PausedScopes(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1)

	found, err := e.UnpauseDefinition(t.Context(), "w")
	require.NoError(t, err)
	require.True(t, found)
	res, err := e.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.Equal(t, int32(1), ran.Load())

	_, err = e.PauseQueue(t.Context(), "bad queue", "")
	require.ErrorIs(t, err, core.ErrInvalidInput)
	noPauses := b.engine(t, 1)
	_, err = noPauses.PauseDefinition(t.Context(), "w", "")
	require.ErrorIs(t, err, engine.ErrNoPauses)
}
