// Package core is the pure heart of Flow: the snapshot projection of a run's history, the
// validation of one workflow decision against it, replay verification, and the invariants every
// history satisfies. It does no I/O, reads no clock and starts no goroutine: time enters only as
// the recorded times of events, so the same history and the same decision always give the same
// result.
//
// # Projection
//
// [Snapshot.Apply] folds one event into a snapshot, checking the invariants that event concerns,
// in time independent of history length. [Project] folds a whole history.
//
// # Decisions
//
// [Decide] makes a run's next decision: automatic transitions first (a step that exhausted its
// retries under fail_run fails the run, cancelling unsettled steps first), then the code's
// identity (build ID, patch markers), then the code's one decision through [Validate], which
// returns the events to append, a waiting verdict, or a typed error. Validating a batch of n
// steps or children takes time linear in n: a pending batch that the code re-issues on every
// decision is compared member by member, field by field, with what history recorded, without
// canonicalising or allocating per member.
//
// # Inputs from outside the code
//
// [StepResult], [Fire], [ReceiveSignal], [ReceiveHook], [SettleChild], [RequestCancel] and
// [Terminate] turn results, timers, deliveries and operator actions into events.
//
// # Verification
//
// [Replay] re-runs workflow code at every recorded decision point and compares; [Check] lists
// every invariant a history breaks.
package core
