package flow

import (
	"errors"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/pkg/event"
)

// Sentinels callers branch on with errors.Is. A call's error wraps one of them, or is a typed
// error that matches it and carries the details ([NonDeterminismError], [RunError],
// [UpdateError], [QueryError], [RateLimitedError], [PermissionError]). docs/errors.md lists the
// error codes (FLOW-REPLAY-1, ...) that messages name.
var (
	// ErrNotFound: the run, hook, step or child referred to does not exist.
	ErrNotFound = core.ErrNotFound
	// ErrInvalidInput: an argument, input or payload is malformed (it does not encode, a name
	// or ID is invalid, an input does not decode into the workflow's type); the message says
	// which.
	ErrInvalidInput = core.ErrInvalidInput
	// ErrInvalidID: a run, step or other decision ID breaks the ID rules.
	ErrInvalidID = event.ErrInvalidID
	// ErrTerminal: the run has ended; it takes no more inputs.
	ErrTerminal = core.ErrTerminal
	// ErrNotEnded matches a *RunError for a run that has not ended yet.
	ErrNotEnded = errors.New("flow: run has not ended")
	// ErrRunExists is wrapped by Start when the run ID is taken by a run with another
	// definition, spec or input.
	ErrRunExists = core.ErrRunExists
	// ErrNoWorker is wrapped by Start (and by a query) when no live worker serves the
	// definition on the queue: start a worker that registers it (docs/operations.md).
	ErrNoWorker = core.ErrNoWorker
	// ErrDeliveryConflict is wrapped by Signal, DeliverHook and Update when the delivery ID was
	// recorded with another payload (or name): the recorded delivery stands, the new one is
	// refused.
	ErrDeliveryConflict = core.ErrDeliveryConflict
	// ErrAlreadyReceived is wrapped by DeliverHook when the hook already took its one delivery.
	ErrAlreadyReceived = core.ErrAlreadyReceived
	// ErrDamaged is wrapped by the errors of calls on a run whose history was found damaged
	// (lost or truncated by a disk or a server crash): Flow quarantines it instead of running
	// its lost steps again.
	ErrDamaged = core.ErrDamaged
	// ErrRunDeleted is wrapped by the errors of calls on a run whose history was deleted after
	// its retention period and not archived (or whose archive is gone); the message says when
	// and why. `flow runs --include-deleted` lists its tombstone; an archived run's history is
	// still read by [Client.History], from its archive.
	ErrRunDeleted = errors.New("flow: run deleted")

	// ErrNonDeterminism matches every *NonDeterminismError: for the same history, the code
	// produced a decision that differs from the recorded one.
	ErrNonDeterminism = core.ErrNonDeterminism
	// ErrInvalidDecision matches every *InvalidDecisionError.
	ErrInvalidDecision = core.ErrInvalidDecision
	// ErrInvalidHistory: a history breaks the rules every history keeps.
	ErrInvalidHistory = core.ErrInvalidHistory

	// ErrUnreachable is wrapped by Dial when NATS does not answer.
	ErrUnreachable = natsconn.ErrUnreachable
	// ErrIngressUnavailable is wrapped by the errors of writes when no ingress service answers.
	ErrIngressUnavailable = errors.New("flow: no ingress service answers")
	// ErrHistoryUnavailable is wrapped by the errors of reads when no history service answers.
	ErrHistoryUnavailable = errors.New("flow: no history service answers")
	// ErrPermissionDenied is wrapped by the *PermissionError of a call that the NATS server
	// refused for lack of permission. Such a call is not retried: connect with the client
	// role's credentials (docs/operations.md).
	ErrPermissionDenied = errors.New("flow: NATS permission denied")
	// ErrRateLimited is wrapped by a *RateLimitedError: the ingress refused an input because
	// its run or its sender is over a rate limit, or its run holds too many inputs its
	// workflow has not taken yet. Nothing was recorded.
	ErrRateLimited = errors.New("flow: rate limited")

	// ErrUnknownQuery is matched by the *QueryError of a query whose name the run's workflow
	// does not handle.
	ErrUnknownQuery = errors.New("flow: unknown query")
	// ErrQueryFailed is matched by the *QueryError of a query whose handler returned an error
	// or panicked.
	ErrQueryFailed = errors.New("flow: query failed")
	// ErrUpdateRejected is matched by the *UpdateError of an update the workflow's validator
	// rejected (or that it registers no handler for).
	ErrUpdateRejected = errors.New("flow: update rejected")
	// ErrUpdateFailed is matched by the *UpdateError of an update that was accepted and then
	// completed with an error.
	ErrUpdateFailed = errors.New("flow: update failed")
	// ErrUpdateAborted is matched by the *UpdateError of an update whose run ended (or
	// continued as new) before the update settled.
	ErrUpdateAborted = errors.New("flow: the run ended before the update settled")

	// ErrScheduleNotFound is wrapped by the errors of operations on a schedule that does not
	// exist.
	ErrScheduleNotFound = errors.New("flow: schedule not found")
	// ErrScheduleExists is wrapped by the error of [ScheduleClient.Create] when the name is
	// taken.
	ErrScheduleExists = errors.New("flow: schedule exists")
	// ErrBatchNotFound is wrapped when no batch job has the ID.
	ErrBatchNotFound = errors.New("flow: no such batch job")
	// ErrBatchExists is wrapped by [BatchClient.Start] when the job ID is taken by a job with
	// another spec.
	ErrBatchExists = errors.New("flow: a batch job with this ID exists with another spec")
)
