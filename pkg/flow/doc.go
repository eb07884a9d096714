// Package flow is the SDK of Flow, a durable workflow engine on NATS JetStream.
//
// A workflow run is an append-only history of events. Workflow code never holds durable state
// in variables: each time the run moves on (a step completed, a timer fired, a signal arrived), a
// worker rebuilds the run's [Snapshot] from history and calls the workflow function, which reads
// what happened through its [Context] and returns exactly one [Decision]. Flow validates the
// decision against history, field by field, and appends it. Any worker on any machine can take
// the run over after any committed event.
//
// # Workflows
//
// A workflow is a function registered under a name:
//
//	flow.RegisterWorkflow(reg, "convert", func(ctx *flow.Context, in Pair) (flow.Decision, error) {
//		if rate := ctx.StepOutput("read-rate"); rate != nil {
//			return ctx.Complete(rate), nil
//		}
//		return ctx.ScheduleStep("read-rate", "readExchangeRate", in), nil
//	})
//
// Every decision names a stable ID. Returning a decision that is already recorded and still
// pending keeps the run waiting on it; the same ID with different fields is a
// [NonDeterminismError]. Decisions: [Context.ScheduleStep] and [Context.ScheduleSteps] (an atomic
// batch), [Context.Sleep] and [Context.WaitUntil] (durable timers), [Context.AwaitSignal],
// [Context.CreateHook], [Context.StartChild] and [Context.StartChildren],
// [Context.UpsertAttributes] (search attributes, declared with [WithSearchAttributes]; see
// docs/search.md), and the endings
// [Context.Complete], [Context.Fail], [Context.Cancel] and [Context.ContinueAsNew]. While a run
// waits it holds no goroutine and no worker.
//
// # Steps
//
// Steps do the work that touches the world: HTTP calls, databases, clocks, randomness. A step
// is delivered at least once: a worker may die after the external effect and before the result
// is committed, and another worker then runs the same attempt again. Give every external effect
// an [IdempotencyKey] ("<run>:<step>:<resource>") that the target system deduplicates by. A
// committed result is never re-run on replay. Retries follow the step's [RetryPolicy].
//
// # Determinism
//
// For the same history, workflow code must return the same decision. Before writing a
// workflow, check:
//
//  1. Could this value change on replay? Clocks, randomness, the environment, network responses
//     and mutable globals can; use [Context.Now] and read the rest in a step. For randomness use
//     [Context.Random] and [Context.UUID] (derived from the run's recorded seed and the call's
//     position, so call them unconditionally); for any other value computed once,
//     [Context.SideEffect] records it in history and reads it back.
//  2. Does every changing value come from a step output, a signal, a hook or a side effect?
//  3. Does every decision have a stable ID with one meaning?
//  4. Can the target system deduplicate a repeated side effect?
//  5. Does the run release the process completely while it waits?
//
// When an answer is unclear, draw the events and the resume points before writing the code.
// Code changes that affect open runs go behind a patch marker ([WithPatches], [Context.Patched])
// or a new build ID ([RegistryOptions]); flowtest.Replay checks new code against stored
// histories in CI.
//
// # Queries, updates and errors
//
// A query ([RegisterQuery], [HandleQuery], [Client.Query]) asks a run a read-only question that
// a worker answers from its snapshot, recording nothing: see docs/queries.md. An update
// ([RegisterUpdate], [Client.Update]) is a validated, durable request that returns a result:
// see docs/updates.md. Errors callers branch on are the sentinels of one var block
// ([ErrNotFound], ...) and typed errors that match them and carry data ([RunError], ...); error
// codes such as FLOW-REPLAY-1 are in docs/errors.md.
package flow
