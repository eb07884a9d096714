package flowtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

type testBundle struct {
	reg *flow.Registry
	env *flowtest.Env
	ctx context.Context
}

func setup(t *testing.T, register func(reg *flow.Registry)) *testBundle {
	t.Helper()
	reg := flow.NewRegistry(nil)
	register(reg)
	env, err := flowtest.New(reg, nil)
	require.NoError(t, err)
	return &testBundle{reg: reg, env: env, ctx: t.Context()}
}

func (b *testBundle) snapshot(t *testing.T, runID string) *flow.Snapshot {
	t.Helper()
	s, err := b.env.Snapshot(b.ctx, runID)
	require.NoError(t, err)
	return s
}

func (b *testBundle) types(t *testing.T, runID string) []event.Type {
	t.Helper()
	hist, err := b.env.History(b.ctx, runID)
	require.NoError(t, err)
	var ts []event.Type
	for _, e := range hist {
		ts = append(ts, e.Type())
	}
	require.Empty(t, core.Check(runID, hist), "history invariants")
	return ts
}

// oneStep is a workflow that runs step "work" of function name with the given policy, then
// completes with its output; with ExhaustionReturnError it completes with the error message.
func oneStep(name string, policy flow.RetryPolicy) func(ctx *flow.Context, _ any) (flow.Decision, error) {
	return func(ctx *flow.Context, _ any) (flow.Decision, error) {
		out, ok, err := flow.Output[string](ctx, "work")
		switch {
		case err != nil:
			return ctx.Complete("handled: " + err.Error()), nil
		case ok:
			return ctx.Complete(out), nil
		}
		return ctx.ScheduleStep("work", name, nil, flow.WithRetry(policy)), nil
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()

	t.Run("BackOffOnTheVirtualClockThenSucceed", func(t *testing.T) {
		t.Parallel()
		failures := 2
		b := setup(t, func(reg *flow.Registry) {
			flow.RegisterWorkflow(reg, "wf", oneStep("flaky", flow.RetryPolicy{MaxAttempts: 5, InitialInterval: 10 * time.Second}))
			flow.RegisterStep(reg, "flaky", func(ctx context.Context, _ any) (string, error) {
				info, _ := flow.StepInfoFrom(ctx)
				if failures > 0 {
					failures--
					return "", flow.NewError("timeout", fmt.Sprintf("attempt %d timed out", info.Attempt))
				}
				return fmt.Sprintf("ok on attempt %d", info.Attempt), nil
			})
		})
		runID, err := b.env.Start(b.ctx, "wf", nil, nil)
		require.NoError(t, err)
		s := b.snapshot(t, runID)
		require.Equal(t, flow.StatusSuspended, s.Status, "waiting out the backoff holds no worker")
		require.Equal(t, core.StepRetrying, s.Steps["work"].Status)
		timers := b.env.PendingTimers()
		require.Len(t, timers, 1)
		require.Equal(t, flowtest.DefaultStart.Add(10*time.Second), timers[0].Due)

		require.NoError(t, b.env.Advance(b.ctx, 9*time.Second))
		require.Equal(t, 1, b.env.StepCalls("flaky"), "not due yet")
		require.NoError(t, b.env.Advance(b.ctx, time.Second))
		require.Equal(t, 2, b.env.StepCalls("flaky"))
		require.Equal(t, flowtest.DefaultStart.Add(30*time.Second), b.env.PendingTimers()[0].Due, "the second backoff doubles")
		require.NoError(t, b.env.Advance(b.ctx, time.Hour))

		var out string
		require.NoError(t, b.env.Result(b.ctx, runID, &out))
		require.Equal(t, "ok on attempt 3", out)
		require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeStepScheduled,
			event.TypeStepFailed, event.TypeStepRetryScheduled, event.TypeStepRetryFired,
			event.TypeStepFailed, event.TypeStepRetryScheduled, event.TypeStepRetryFired,
			event.TypeStepCompleted, event.TypeRunCompleted}, b.types(t, runID))
	})

	t.Run("NonRetryableErrorFailsTheRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(reg *flow.Registry) {
			flow.RegisterWorkflow(reg, "wf", oneStep("declined", flow.RetryPolicy{MaxAttempts: 5}))
			flow.RegisterStep(reg, "declined", func(context.Context, any) (string, error) {
				return "", flow.NonRetryable(flow.NewError("card_declined", "insufficient funds"))
			})
		})
		runID, err := b.env.Start(b.ctx, "wf", nil, nil)
		require.NoError(t, err)
		err = b.env.Result(b.ctx, runID, nil)
		var runErr *flow.RunError
		require.ErrorAs(t, err, &runErr)
		require.Equal(t, flow.StatusFailed, runErr.Status)
		require.Equal(t, "card_declined", runErr.Kind)
		require.Contains(t, runErr.Message, "insufficient funds")
		require.Equal(t, 1, b.env.StepCalls("declined"))
	})

	t.Run("ReturnErrorHandsTheFailureToTheWorkflow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(reg *flow.Registry) {
			flow.RegisterWorkflow(reg, "wf", oneStep("broken", flow.RetryPolicy{MaxAttempts: 2, OnExhaustion: flow.ExhaustionReturnError}))
			flow.RegisterStep(reg, "broken", func(context.Context, any) (string, error) { return "", errors.New("boom") })
		})
		runID, err := b.env.Start(b.ctx, "wf", nil, nil)
		require.NoError(t, err)
		require.NoError(t, b.env.Advance(b.ctx, time.Minute))
		var out string
		require.NoError(t, b.env.Result(b.ctx, runID, &out))
		require.Equal(t, `handled: step "work" (broken) failed after 2 attempt(s): error: boom`, out)
	})

	t.Run("StepPanicIsARetryableFailure", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(reg *flow.Registry) {
			flow.RegisterWorkflow(reg, "wf", oneStep("panics", flow.RetryPolicy{MaxAttempts: 1, OnExhaustion: flow.ExhaustionReturnError}))
			flow.RegisterStep(reg, "panics", func(context.Context, any) (string, error) { panic("nil map") })
		})
		runID, err := b.env.Start(b.ctx, "wf", nil, nil)
		require.NoError(t, err)
		var out string
		require.NoError(t, b.env.Result(b.ctx, runID, &out))
		require.Contains(t, out, `panic: step "panics" panicked: nil map`)
	})
}

func TestBatchFailureCancelsSiblings(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			return ctx.ScheduleSteps(
				flow.Step{ID: "a", Name: "ok"},
				flow.Step{ID: "b", Name: "fatal", Retry: &flow.RetryPolicy{MaxAttempts: 1}},
				flow.Step{ID: "c", Name: "ok"},
			), nil
		})
		flow.RegisterStep(reg, "ok", func(context.Context, any) (string, error) { return "ok", nil })
		flow.RegisterStep(reg, "fatal", func(context.Context, any) (string, error) { return "", errors.New("disk full") })
	})
	runID, err := b.env.Start(b.ctx, "wf", nil, nil)
	require.NoError(t, err)
	s := b.snapshot(t, runID)
	require.Equal(t, flow.StatusFailed, s.Status)
	require.Equal(t, event.CauseStepExhausted, s.Outcome.Cause)
	require.Equal(t, core.StepCompleted, s.Steps["a"].Status)
	require.Equal(t, core.StepCancelled, s.Steps["c"].Status, "c was in flight when b failed for good")
	require.True(t, s.Steps["c"].SideEffectUnknown)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeStepScheduled, event.TypeStepCompleted, event.TypeStepFailed,
		event.TypeStepCancelled, event.TypeRunFailed}, b.types(t, runID))
}

func TestCancellation(t *testing.T) {
	t.Parallel()

	// cancelWF starts a run of "wf", cancels it with reason, requires it cancelled and returns
	// its ID and snapshot.
	cancelWF := func(t *testing.T, b *testBundle, reason string) (string, *flow.Snapshot) {
		t.Helper()
		runID, err := b.env.Start(b.ctx, "wf", nil, nil)
		require.NoError(t, err)
		require.NoError(t, b.env.Cancel(b.ctx, runID, reason))
		s := b.snapshot(t, runID)
		require.Equal(t, flow.StatusCancelled, s.Status)
		return runID, s
	}

	t.Run("WorkflowThatIgnoresItIsCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(reg *flow.Registry) {
			flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
				return ctx.Sleep("forever", 365*24*time.Hour), nil
			})
		})
		runID, s := cancelWF(t, b, "no longer needed")
		require.Equal(t, event.CauseCancelRequested, s.Outcome.Cause)
		require.Equal(t, "cancellation requested: no longer needed", s.Outcome.Reason)
		require.NoError(t, b.env.Advance(b.ctx, 366*24*time.Hour), "the moot timer fires into nothing")
		require.ErrorIs(t, b.env.Cancel(b.ctx, runID, "again"), flow.ErrTerminal, "cancelling an ended run is refused")
	})

	t.Run("WorkflowThatHandlesItCleansUp", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(reg *flow.Registry) {
			flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
				if ctx.CancelRequested() {
					if ctx.StepOutput("release") == nil {
						return ctx.ScheduleStep("release", "releaseStock", nil), nil
					}
					return ctx.Cancel("released stock"), nil
				}
				return ctx.AwaitSignal("go", "go"), nil
			})
			flow.RegisterStep(reg, "releaseStock", func(context.Context, any) (bool, error) { return true, nil })
		})
		_, s := cancelWF(t, b, "customer changed their mind")
		require.Equal(t, event.CauseWorkflow, s.Outcome.Cause)
		require.Equal(t, "released stock", s.Outcome.Reason)
		require.Equal(t, 1, b.env.StepCalls("releaseStock"))
	})

	t.Run("ReachesChildrenByPolicy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(reg *flow.Registry) {
			flow.RegisterWorkflow(reg, "parent", func(ctx *flow.Context, _ any) (flow.Decision, error) {
				return ctx.StartChildren(
					flow.Child{ID: "linked", Definition: "child"},
					flow.Child{ID: "detached", Definition: "child", CancelPolicy: flow.CancelPolicyAbandon},
				), nil
			})
			flow.RegisterWorkflow(reg, "child", func(ctx *flow.Context, _ any) (flow.Decision, error) {
				if ctx.Fired("nap") {
					return ctx.Complete("woke up"), nil
				}
				return ctx.Sleep("nap", time.Hour), nil
			})
		})
		runID, err := b.env.Start(b.ctx, "parent", nil, &flowtest.StartOptions{RunID: "trip"})
		require.NoError(t, err)
		require.Equal(t, flow.StatusSuspended, b.snapshot(t, "trip=linked").Status)
		require.NoError(t, b.env.Cancel(b.ctx, runID, "trip called off"))
		require.Equal(t, flow.StatusCancelled, b.snapshot(t, runID).Status)
		linked := b.snapshot(t, "trip=linked")
		require.Equal(t, flow.StatusCancelled, linked.Status)
		require.Equal(t, `cancellation requested: parent run "trip" ended (cancelled)`, linked.Outcome.Reason)
		require.Equal(t, flow.StatusSuspended, b.snapshot(t, "trip=detached").Status)
		require.NoError(t, b.env.Advance(b.ctx, time.Hour))
		require.Equal(t, flow.StatusCompleted, b.snapshot(t, "trip=detached").Status)
	})
}

func TestBlockedRuns(t *testing.T) {
	t.Parallel()

	// start starts a run of "wf" in a new Env deployed with reg.
	start := func(t *testing.T, reg *flow.Registry) (*flowtest.Env, context.Context, string) {
		t.Helper()
		env, err := flowtest.New(reg, nil)
		require.NoError(t, err)
		ctx := t.Context()
		runID, err := env.Start(ctx, "wf", nil, nil)
		require.NoError(t, err)
		return env, ctx, runID
	}

	t.Run("PanicBlocksOnceUntilFixedCodeIsDeployed", func(t *testing.T) {
		t.Parallel()
		register := func(broken bool) *flow.Registry {
			reg := flow.NewRegistry(nil)
			flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
				if broken {
					panic("order total is negative")
				}
				return ctx.Complete("fixed"), nil
			})
			return reg
		}
		env, ctx, runID := start(t, register(true))
		for range 3 {
			require.NoError(t, env.Resume(ctx, runID), "a redelivered task retries")
		}
		s, err := env.Snapshot(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, flow.StatusBlocked, s.Status)
		require.Equal(t, core.FailurePanic, s.Blocked.Kind)
		require.Contains(t, s.Blocked.Detail, "workflow code panicked: order total is negative")
		require.Contains(t, s.Blocked.Detail, "flowtest_test.TestBlockedRuns")
		hist, err := env.History(ctx, runID)
		require.NoError(t, err)
		require.Len(t, hist, 2, "decision.failed is recorded once per distinct failure")
		var runErr *flow.RunError
		require.ErrorAs(t, env.Result(ctx, runID, nil), &runErr)
		require.Equal(t, flow.StatusBlocked, runErr.Status)

		require.NoError(t, env.Deploy(register(false)))
		require.NoError(t, env.Resume(ctx, runID))
		var out string
		require.NoError(t, env.Result(ctx, runID, &out))
		require.Equal(t, "fixed", out)
	})

	t.Run("ChangedCodeIsNonDeterministic", func(t *testing.T) {
		t.Parallel()
		register := func(input string) *flow.Registry {
			reg := flow.NewRegistry(nil)
			flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
				if ctx.StepOutput("read") == nil {
					return ctx.ScheduleStep("read", "read", input), nil
				}
				if ctx.Signal("go") == nil {
					return ctx.AwaitSignal("go", "go"), nil
				}
				return ctx.Complete(nil), nil
			})
			flow.RegisterStep(reg, "read", func(context.Context, string) (int, error) { return 1, nil })
			return reg
		}
		env, ctx, runID := start(t, register("CNY/USD"))

		require.NoError(t, env.Deploy(register("EUR/USD")))
		require.NoError(t, env.Signal(ctx, runID, "go", true))
		s, err := env.Snapshot(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, flow.StatusBlocked, s.Status, "replaying the history with the new code finds the change")
		require.Equal(t, core.FailureNonDeterminism, s.Blocked.Kind)
		require.Equal(t, core.CodeFieldMismatch, s.Blocked.Code)
		require.Contains(t, s.Blocked.Detail, `step "read" field input was "CNY/USD" at seq 2, but the workflow code now gives "EUR/USD"`)

		require.NoError(t, env.Terminate(ctx, runID, "abandoned after a bad deploy"))
		s, err = env.Snapshot(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, flow.StatusFailed, s.Status)
		require.Equal(t, event.CauseOperator, s.Outcome.Cause)
	})

	t.Run("PatchMarkersKeepOldRunsOnTheOldBranch", func(t *testing.T) {
		t.Parallel()
		register := func(patches ...string) *flow.Registry {
			reg := flow.NewRegistry(nil)
			flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
				if !ctx.Fired("wait") {
					return ctx.Sleep("wait", time.Minute), nil
				}
				if ctx.Patched("new-pricing") {
					return ctx.Complete("new"), nil
				}
				return ctx.Complete("old"), nil
			}, flow.WithPatches(patches...))
			return reg
		}
		env, ctx, before := start(t, register())
		require.NoError(t, env.Deploy(register("new-pricing")))
		after, err := env.Start(ctx, "wf", nil, nil)
		require.NoError(t, err)
		require.NoError(t, env.Advance(ctx, time.Minute))
		var got string
		require.NoError(t, env.Result(ctx, before, &got))
		require.Equal(t, "old", got)
		require.NoError(t, env.Result(ctx, after, &got))
		require.Equal(t, "new", got)

		third, err := env.Start(ctx, "wf", nil, nil)
		require.NoError(t, err)
		require.NoError(t, env.Deploy(register()), "dropping a marker that an open run recorded")
		require.NoError(t, env.Advance(ctx, time.Minute))
		s, err := env.Snapshot(ctx, third)
		require.NoError(t, err)
		require.Equal(t, flow.StatusBlocked, s.Status)
		require.Equal(t, core.CodeVersionMismatch, s.Blocked.Code)
	})

	t.Run("RunsPinnedToAnotherBuildAreLeftAlone", func(t *testing.T) {
		t.Parallel()
		register := func(build string) *flow.Registry {
			reg := flow.NewRegistry(&flow.RegistryOptions{BuildID: build})
			flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
				if ctx.Signal("go") == nil {
					return ctx.AwaitSignal("go", "go"), nil
				}
				return ctx.Complete(build), nil
			})
			return reg
		}
		env, ctx, runID := start(t, register("v1"))
		require.NoError(t, env.Deploy(register("v2")))
		require.NoError(t, env.Signal(ctx, runID, "go", 1))
		s, err := env.Snapshot(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, flow.StatusRunning, s.Status, "a decision is due")
		require.Equal(t, uint64(3), s.Seq, "but a v2 worker never decides a v1 run")
		require.Equal(t, "v1", s.Spec.BuildID)
		require.NoError(t, env.Deploy(register("v1")))
		require.NoError(t, env.Resume(ctx, runID))
		var out string
		require.NoError(t, env.Result(ctx, runID, &out))
		require.Equal(t, "v1", out)
	})
}

func TestContinueAsNew(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "count", func(ctx *flow.Context, n int) (flow.Decision, error) {
			if n == 3 {
				return ctx.Complete(fmt.Sprintf("done in run %s", ctx.RunID())), nil
			}
			return ctx.ContinueAsNew(n + 1), nil
		})
	})
	runID, err := b.env.Start(b.ctx, "count", 0, &flowtest.StartOptions{RunID: "loop"})
	require.NoError(t, err)
	var out string
	require.NoError(t, b.env.Result(b.ctx, runID, &out), "Result follows the continuations")
	require.Equal(t, "done in run loop=3", out)
	require.Equal(t, []string{"loop", "loop=1", "loop=2", "loop=3"}, b.env.Runs())
	s := b.snapshot(t, "loop=2")
	require.Equal(t, "loop=1", s.ContinuedFrom)
	require.Equal(t, 2, s.Generation)
	require.Equal(t, "loop=3", s.Outcome.SuccessorRunID)
}

func TestStart(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "greet", func(ctx *flow.Context, in struct{ Name string }) (flow.Decision, error) {
			return ctx.Complete("hello " + in.Name), nil
		})
	})

	t.Run("IsIdempotentForTheSameInput", func(t *testing.T) {
		t.Parallel()
		id, err := b.env.Start(b.ctx, "greet", map[string]string{"Name": "ann"}, &flowtest.StartOptions{RunID: "greet-ann"})
		require.NoError(t, err)
		again, err := b.env.Start(b.ctx, "greet", map[string]string{"Name": "ann"}, &flowtest.StartOptions{RunID: "greet-ann"})
		require.NoError(t, err)
		require.Equal(t, id, again)
		hist, err := b.env.History(b.ctx, id)
		require.NoError(t, err)
		require.Len(t, hist, 2)

		_, err = b.env.Start(b.ctx, "greet", map[string]string{"Name": "bob"}, &flowtest.StartOptions{RunID: "greet-ann"})
		require.ErrorIs(t, err, engine.ErrRunExists)
		require.ErrorContains(t, err, `run "greet-ann" already exists with a different input`)
	})

	t.Run("RefusesBadInputAndAppendsNothing", func(t *testing.T) {
		t.Parallel()
		_, err := b.env.Start(b.ctx, "gret", nil, nil)
		require.ErrorIs(t, err, flow.ErrNotFound)
		require.ErrorContains(t, err, `workflow definition "gret" is not registered (registered: [greet])`)

		_, err = b.env.Start(b.ctx, "greet", "not an object", nil)
		require.ErrorIs(t, err, flow.ErrInvalidInput)
		require.ErrorContains(t, err, "does not decode into struct { Name string }")

		_, err = b.env.Start(b.ctx, "greet", nil, &flowtest.StartOptions{RunID: "orders.1"})
		require.ErrorIs(t, err, flow.ErrInvalidID)

		_, err = b.env.Start(b.ctx, "greet", nil, &flowtest.StartOptions{RunID: "x=1"})
		require.ErrorIs(t, err, flow.ErrInvalidID, "'=' is reserved for derived run IDs")
		require.NotContains(t, b.env.Runs(), "x=1")
	})
}

func TestDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			if ctx.Hook("callback") == nil {
				return ctx.CreateHook("callback", nil), nil
			}
			if ctx.Signal("second") == nil {
				if ctx.Signal("first") == nil {
					return ctx.AwaitSignal("first", "poke"), nil
				}
				return ctx.AwaitSignal("second", "poke"), nil
			}
			return ctx.Complete([]json.RawMessage{ctx.Hook("callback"), ctx.Signal("first"), ctx.Signal("second")}), nil
		})
	})
	runID, err := b.env.Start(b.ctx, "wf", nil, nil)
	require.NoError(t, err)

	// Signals sent before anyone waits are buffered; a redelivery is accepted once.
	require.NoError(t, b.env.SignalWithID(b.ctx, runID, "poke", 1, "delivery-1"))
	require.NoError(t, b.env.SignalWithID(b.ctx, runID, "poke", 1, "delivery-1"))
	require.NoError(t, b.env.SignalWithID(b.ctx, runID, "poke", 2, "delivery-2"))
	require.Len(t, b.snapshot(t, runID).Signals, 2)

	token := b.snapshot(t, runID).Hooks["callback"].Token
	require.ErrorIs(t, b.env.DeliverHook(b.ctx, "no-such-token", 1), flow.ErrNotFound)
	require.NoError(t, b.env.DeliverHookWithID(b.ctx, token, "receipt", "cb-1"))
	require.NoError(t, b.env.DeliverHookWithID(b.ctx, token, "receipt", "cb-1"), "a redelivery is accepted, even after the run ended")
	require.ErrorIs(t, b.env.DeliverHookWithID(b.ctx, token, "other", "cb-2"), flow.ErrTerminal,
		"the run completed once the hook and both signals were in")

	var out []any
	require.NoError(t, b.env.Result(b.ctx, runID, &out))
	require.Equal(t, []any{"receipt", 1.0, 2.0}, out)
	require.ErrorIs(t, b.env.Signal(b.ctx, runID, "poke", 3), flow.ErrTerminal)
	require.ErrorIs(t, b.env.Signal(b.ctx, "no-such-run", "poke", 3), flow.ErrNotFound)
}

func TestChildrenRecordTheirOwnSpec(t *testing.T) {
	t.Parallel()
	reg := flow.NewRegistry(&flow.RegistryOptions{BuildID: "v7"})
	flow.RegisterWorkflow(reg, "parent", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if r := ctx.Child("kid"); r != nil {
			return ctx.Complete(r.Output), nil
		}
		return ctx.StartChild("kid", "child", nil), nil
	})
	flow.RegisterWorkflow(reg, "child", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		return ctx.Complete(ctx.Patched("v2-pricing")), nil
	}, flow.WithPatches("v2-pricing"))
	env, err := flowtest.New(reg, nil)
	require.NoError(t, err)
	runID, err := env.Start(t.Context(), "parent", nil, &flowtest.StartOptions{RunID: "p"})
	require.NoError(t, err)
	var patched bool
	require.NoError(t, env.Result(t.Context(), runID, &patched))
	require.True(t, patched, "a child started by new code takes that code's patch markers")
	s, err := env.Snapshot(t.Context(), "p=kid")
	require.NoError(t, err)
	require.Equal(t, event.Spec{Definition: "child", BuildID: "v7", Patches: []string{"v2-pricing"}}, s.Spec)
}

// A parent that fails with its child's error keeps the child's error kind.
func TestParentFailsWithChildErrorKind(t *testing.T) {
	t.Parallel()
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "parent", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if r := ctx.Child("pay"); r != nil {
			if r.Err != nil {
				return ctx.Fail(r.Err), nil
			}
			return ctx.Complete(r.Output), nil
		}
		return ctx.StartChild("pay", "payment", nil), nil
	})
	flow.RegisterWorkflow(reg, "payment", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		return ctx.Fail(flow.NewError("card_declined", "insufficient funds")), nil
	})
	env, err := flowtest.New(reg, nil)
	require.NoError(t, err)
	runID, err := env.Start(t.Context(), "parent", nil, nil)
	require.NoError(t, err)
	var runErr *flow.RunError
	require.ErrorAs(t, env.Result(t.Context(), runID, nil), &runErr)
	require.Equal(t, flow.StatusFailed, runErr.Status)
	require.Equal(t, "card_declined", runErr.Kind)
	require.Contains(t, runErr.Message, "insufficient funds")
}
