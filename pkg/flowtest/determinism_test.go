package flowtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

type ticket struct {
	ID     string `json:"id"`
	Number int    `json:"number"`
	Lucky  int    `json:"lucky"`
}

// ticketWorkflow draws a UUID and a random number on every evaluation, records an order number
// once with a side effect (numbers counts the calls of its function), waits for a signal so
// that several decisions and replays go by, then sends what it drew to a step and completes
// with the step's output.
func ticketWorkflow(numbers *atomic.Int64, next func() int) func(ctx *flow.Context, _ any) (flow.Decision, error) {
	return func(ctx *flow.Context, _ any) (flow.Decision, error) {
		id := ctx.UUID()
		lucky := ctx.Random().IntN(1_000_000)
		number, d, err := flow.SideEffectValue(ctx, "order-number", func() int { numbers.Add(1); return next() })
		if d != nil || err != nil {
			return d, err
		}
		if ctx.Signal("go") == nil {
			return ctx.AwaitSignal("go", "go"), nil
		}
		out, ok, err := flow.Output[ticket](ctx, "issue")
		if err != nil || !ok {
			return ctx.ScheduleStep("issue", "issue", ticket{ID: id, Number: number, Lucky: lucky}), err
		}
		return ctx.Complete(out), nil
	}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestDeterminismHelpers(t *testing.T) {
	t.Parallel()
	type bundle struct {
		env     *flowtest.Env
		numbers *atomic.Int64
		ctx     context.Context
	}
	setup := func(t *testing.T, next func() int) *bundle {
		t.Helper()
		b := &bundle{numbers: &atomic.Int64{}, ctx: t.Context()}
		reg := flow.NewRegistry(nil)
		flow.RegisterWorkflow(reg, "ticket", ticketWorkflow(b.numbers, next))
		flow.RegisterStep(reg, "issue", func(_ context.Context, in ticket) (ticket, error) { return in, nil })
		// No cache: every drive loads the run cold and replays its whole history.
		env, err := flowtest.New(reg, &flowtest.Options{CacheSize: -1})
		require.NoError(t, err)
		b.env = env
		return b
	}
	run := func(t *testing.T, b *bundle, runID string) ticket {
		t.Helper()
		_, err := b.env.Start(b.ctx, "ticket", nil, &flowtest.StartOptions{RunID: runID})
		require.NoError(t, err)
		require.NoError(t, b.env.Signal(b.ctx, runID, "go", true))
		var out ticket
		require.NoError(t, b.env.Result(b.ctx, runID, &out))
		return out
	}

	t.Run("ValuesAreStableAcrossDecisionsAndReplays", func(t *testing.T) {
		t.Parallel()
		n := 0
		b := setup(t, func() int { n++; return 1000 + n })
		out := run(t, b, "ticket-1")
		require.Regexp(t, uuidV4, out.ID)
		require.Equal(t, 1001, out.Number)
		require.EqualValues(t, 1, b.numbers.Load(), "the side effect's function runs once, not once per replay")
		hist, err := b.env.History(b.ctx, "ticket-1")
		require.NoError(t, err)
		var recorded []string
		for _, e := range hist {
			if se, ok := e.Payload.(*event.SideEffectRecorded); ok {
				recorded = append(recorded, fmt.Sprintf("%s=%s", se.SideEffectID, se.Value))
			}
		}
		require.Equal(t, []string{"order-number=1001"}, recorded)

		other := run(t, b, "ticket-2")
		require.NotEqual(t, out.ID, other.ID, "another run draws other values")
		require.Equal(t, 1002, other.Number)
	})

	t.Run("ReplayReadsTheRecordedValue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func() int { return 7 })
		out := run(t, b, "ticket-3")
		hist, err := b.env.History(b.ctx, "ticket-3")
		require.NoError(t, err)

		// New code whose side effect would compute another value replays the history: the
		// recorded value is read back, and the function is not called.
		var calls atomic.Int64
		changed := flow.NewRegistry(nil)
		flow.RegisterWorkflow(changed, "ticket", ticketWorkflow(&calls, func() int { return 99 }))
		require.NoError(t, flowtest.ReplayHistory(hist, changed))
		require.Zero(t, calls.Load())
		require.Equal(t, 7, out.Number)

		// Code that uses the side effect's ID for a step does not.
		clash := flow.NewRegistry(nil)
		flow.RegisterWorkflow(clash, "ticket", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			return ctx.ScheduleStep("order-number", "issue", nil), nil
		})
		err = flowtest.ReplayHistory(hist, clash)
		require.ErrorIs(t, err, flow.ErrNonDeterminism)

		// Code that draws another UUID sends another input to the step: a non-determinism error.
		drift := flow.NewRegistry(nil)
		flow.RegisterWorkflow(drift, "ticket", func(ctx *flow.Context, in any) (flow.Decision, error) {
			_ = ctx.UUID() // one more draw before the one the step's input uses
			return ticketWorkflow(&calls, func() int { return 7 })(ctx, in)
		})
		err = flowtest.ReplayHistory(hist, drift)
		require.ErrorIs(t, err, flow.ErrNonDeterminism)
		require.ErrorContains(t, err, `step "issue"`)
	})
}

func TestQueriesInMemory(t *testing.T) {
	t.Parallel()
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "ticket", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		stage := "waiting"
		if ctx.Signal("go") != nil {
			stage = "released"
		}
		flow.HandleQuery(ctx, "stage", func(struct{}) (string, error) { return stage, nil })
		if ctx.Signal("go") == nil {
			return ctx.AwaitSignal("go", "go"), nil
		}
		return ctx.Complete(stage), nil
	})
	env, err := flowtest.New(reg, nil)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = env.Start(ctx, "ticket", nil, &flowtest.StartOptions{RunID: "t-1"})
	require.NoError(t, err)
	var stage string
	require.NoError(t, env.Query(ctx, "t-1", "stage", nil, &stage))
	require.Equal(t, "waiting", stage)
	before, err := env.History(ctx, "t-1")
	require.NoError(t, err)
	require.NoError(t, env.Signal(ctx, "t-1", "go", json.RawMessage(`1`)))
	require.NoError(t, env.Query(ctx, "t-1", "stage", nil, &stage))
	require.Equal(t, "released", stage, "an ended run answers from its final history")
	after, err := env.History(ctx, "t-1")
	require.NoError(t, err)
	require.Len(t, after, len(before)+2, "only the signal and the completion were recorded: queries append nothing")
	require.ErrorIs(t, env.Query(ctx, "t-1", "eta", nil, nil), flow.ErrUnknownQuery)
	require.ErrorIs(t, env.Query(ctx, "t-404", "stage", nil, nil), flow.ErrNotFound)
}
