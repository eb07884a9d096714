// Package batch runs bulk operations on runs as durable jobs: cancel, terminate, signal, reset,
// pause or unpause every run a list filter (docs/search.md) selects (docs/batch.md).
//
// A job is an entry of FLOW_BATCHES, key "job.<id>": its Spec, its State and its progress,
// changed only by compare-and-set. Its life:
//
//	pending   created; its targets are not recorded yet
//	running   its targets are recorded (keys "targets.<id>.<n>", ChunkSize run IDs each),
//	          Total of them; Cursor of them are done, in order
//	completed every target is done
//	stopped   an operator stopped it (Stop); the targets after Cursor are left alone
//	failed    it could not go on (its filter no longer compiles, a target chunk is lost)
//
// The target set is the runs the runs index shows matching the filter, started before the job
// was created, in run ID order; it is recorded before any run is touched, and never changes
// after (a crash before it is recorded resolves it again; nothing was touched yet). The
// executor (package services/scheduler, under its own lease) applies the operation to each
// target under a delivery ID derived from the job and the run (DeliveryID), at the job's rate,
// window by window, and advances Cursor and the counts with each window's results in one
// compare-and-set. A crash between an operation and the cursor repeats the window: each repeat
// finds its delivery recorded in the run and reports it applied again, so that every target is
// applied at most once and counted exactly once.
package batch

import "github.com/flowrun/flow/internal/batchspec"

// The description of jobs is package batchspec's, which the SDK imports without the executor.
type (
	// Op is a batch job's operation.
	Op = batchspec.Op
	// State is where a job is in its life.
	State = batchspec.State
	// Spec is what a job does (batchspec.Spec).
	Spec = batchspec.Spec
	// ResetSpec is a reset job's reset (batchspec.ResetSpec).
	ResetSpec = batchspec.ResetSpec
	// Job is a job's entry in FLOW_BATCHES (batchspec.Job).
	Job = batchspec.Job
	// Note names a run a job failed or skipped (batchspec.Note).
	Note = batchspec.Note
	// Outcome is what an operation did to one target.
	Outcome = batchspec.Outcome
	// Result is one target's outcome.
	Result = batchspec.Result
	// Event is a change to a job, as Next applies it.
	Event = batchspec.Event
	// EventKind names a change.
	EventKind = batchspec.EventKind
)

// The operations.
const (
	OpCancel    = batchspec.OpCancel
	OpTerminate = batchspec.OpTerminate
	OpSignal    = batchspec.OpSignal
	OpReset     = batchspec.OpReset
	OpPause     = batchspec.OpPause
	OpUnpause   = batchspec.OpUnpause
)

// Ops lists the operations, in the documentation's order.
var Ops = batchspec.Ops

// The states.
const (
	StatePending   = batchspec.StatePending
	StateRunning   = batchspec.StateRunning
	StateCompleted = batchspec.StateCompleted
	StateStopped   = batchspec.StateStopped
	StateFailed    = batchspec.StateFailed
)

// Rates, chunks and notes (batchspec).
const (
	DefaultRate = batchspec.DefaultRate
	MaxRate     = batchspec.MaxRate
	ChunkSize   = batchspec.ChunkSize
	MaxNotes    = batchspec.MaxNotes
)

// The outcomes.
const (
	Applied = batchspec.Applied
	Skipped = batchspec.Skipped
	Failed  = batchspec.Failed
)

// The changes.
const (
	EventResolved      = batchspec.EventResolved
	EventProgress      = batchspec.EventProgress
	EventCompleted     = batchspec.EventCompleted
	EventStopRequested = batchspec.EventStopRequested
	EventStopped       = batchspec.EventStopped
	EventFailed        = batchspec.EventFailed
)

// Errors of jobs.
var (
	// ErrInvalid is wrapped by Spec.Validate's and ValidateID's errors.
	ErrInvalid = batchspec.ErrInvalid
	// ErrTransition is wrapped by Next's errors.
	ErrTransition = batchspec.ErrTransition
)

// Next applies ev to j (batchspec.Next).
func Next(j Job, ev Event) (Job, error) { return batchspec.Next(j, ev) }

// DeliveryID is the delivery ID of a job's operation on run runID (batchspec.DeliveryID).
func DeliveryID(jobID, runID string) string { return batchspec.DeliveryID(jobID, runID) }

// ValidateID checks a job ID (batchspec.ValidateID).
func ValidateID(id string) error { return batchspec.ValidateID(id) }
