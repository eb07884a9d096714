package core

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinels that callers branch on. Typed errors below match them with errors.Is.
var (
	// ErrNonDeterminism matches every *NonDeterminismError.
	ErrNonDeterminism = errors.New("flow: non-determinism")
	// ErrInvalidDecision matches every *InvalidDecisionError.
	ErrInvalidDecision = errors.New("flow: invalid decision")
	// ErrInvalidHistory matches every *HistoryError.
	ErrInvalidHistory = errors.New("flow: invalid history")
	// ErrTerminal: the run has ended; nothing more can be appended to it.
	ErrTerminal = errors.New("flow: run has ended")
	// ErrStale: the input refers to a state the run has already left (a step result for an
	// attempt that settled, a timer that already fired). Drop it; it is not a failure.
	ErrStale = errors.New("flow: stale input")
	// ErrDuplicate: the delivery was already recorded. Treat it as accepted.
	ErrDuplicate = errors.New("flow: duplicate delivery")
	// ErrNotFound: the run, step, hook or child referred to does not exist.
	ErrNotFound = errors.New("flow: not found")
	// ErrInvalidInput: a delivery or result is malformed (bad JSON, empty name or delivery ID).
	ErrInvalidInput = errors.New("flow: invalid input")
	// ErrAlreadyReceived: the hook already received a different delivery.
	ErrAlreadyReceived = errors.New("flow: hook already received a delivery")
	// ErrDeliveryConflict: a delivery ID already recorded was reused with another name or
	// payload. The recorded delivery stands; the new one is refused, not dropped in silence.
	ErrDeliveryConflict = errors.New("flow: delivery ID reused with a different payload")
	// ErrRunExists: a start named the ID of an existing run whose definition, spec or input
	// differs (engine.RunExistsError matches it).
	ErrRunExists = errors.New("flow: run exists")
	// ErrNoWorker: no live worker serves the workflow definition on the queue
	// (liveness.NoWorkerError wraps it).
	ErrNoWorker = errors.New("flow: no live worker serves the workflow definition")
	// ErrDamaged: a run's stored history was found damaged (lost or truncated by a disk or a
	// server crash, or holding messages that are not its history); store.DamagedError matches it.
	ErrDamaged = errors.New("flow: run history damaged")
)

// DefaultQueue is the task queue of runs started without one.
const DefaultQueue = "default"

// Error codes, each documented in docs/errors.md.
const (
	CodeFieldMismatch    = "FLOW-REPLAY-1"
	CodeDecisionMismatch = "FLOW-REPLAY-2"
	CodeVersionMismatch  = "FLOW-REPLAY-3"
	CodeInvalidDecision  = "FLOW-DECISION-1"
	CodeAlreadySettled   = "FLOW-DECISION-2"
	CodePanic            = "FLOW-DECISION-3"
	CodeNoDecision       = "FLOW-DECISION-4"
	CodeHistory          = "FLOW-HISTORY-1"
)

// NonDeterminismError reports that workflow code, given the same history, produced a decision
// that differs from the one recorded. The run is not advanced; it shows Blocked until code that
// replays it is deployed or an operator ends it.
type NonDeterminismError struct {
	RunID string
	// Kind is the kind of identity: "step", "wait", "signal_wait", "hook", "child",
	// "continue_as_new", "run" (spec fields), "decision" (a different decision altogether) or
	// "upsert" (an UpsertAttributes decision).
	Kind string
	// ID is the identity compared (step ID, wait ID, ...); empty for run-level fields.
	ID string
	// Field is the field that differs: step_id, wait_id, hook_id, child_id, name, input, retry,
	// deadline, duration, signal_name, token, metadata, definition, cancel_policy, members,
	// kind, output, successor_run_id, build_id, patches, event or decision; for an upsert,
	// upsert_id or "attributes.<name>" naming the attribute whose value differs.
	Field string
	// Recorded and New render the two values.
	Recorded string
	New      string
	// Seq is the sequence of the event that recorded the original value.
	Seq uint64
}

// Code returns the documented error code.
func (e *NonDeterminismError) Code() string {
	switch e.Field {
	case "decision", "kind", "members", "step_id", "wait_id", "hook_id", "child_id", "event", "upsert_id":
		return CodeDecisionMismatch
	case "build_id", "patches":
		return CodeVersionMismatch
	}
	return CodeFieldMismatch
}

func (e *NonDeterminismError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "flow: [%s] non-determinism in run %q: ", e.Code(), e.RunID)
	subject := e.Kind
	if e.ID != "" {
		subject = fmt.Sprintf("%s %q", e.Kind, e.ID)
	}
	switch e.Field {
	case "decision":
		fmt.Fprintf(&b, "at seq %d history has %s, but the workflow code now gives %s; ", e.Seq, e.Recorded, e.New)
	case "kind":
		fmt.Fprintf(&b, "ID %q was recorded for a %s at seq %d, but the workflow code now uses it for a %s; ", e.ID, e.Recorded, e.Seq, e.New)
	default:
		fmt.Fprintf(&b, "%s field %s was %s at seq %d, but the workflow code now gives %s; ", subject, e.Field, e.Recorded, e.Seq, e.New)
	}
	b.WriteString(e.hint())
	return b.String()
}

func (e *NonDeterminismError) hint() string {
	switch e.Field {
	case "build_id":
		return "possible causes: this run is pinned to another build of the code; what to do: let a worker of the recorded build decide it, or cancel the run"
	case "patches":
		return "possible causes: the run started with a patch marker that this code no longer declares; what to do: keep declaring the patch until no run that recorded it is open"
	case "decision", "kind", "members", "step_id", "wait_id", "hook_id", "child_id", "event", "upsert_id":
		return "possible causes: the workflow code changed its sequence of decisions while this run was in flight, or a decision depends on a clock, randomness, the environment or a global; what to do: deploy code that replays this history (guard the change with ctx.Patched and a patch marker, or a new build ID), and read changing values in a step"
	}
	return "possible causes: a value the workflow computes changed between executions (read a clock, randomness, the environment or a global in a decision) or the workflow code changed while this run was in flight; what to do: read changing values in a step and use its output, and guard code changes with ctx.Patched and a patch marker or deploy them under a new build ID"
}

// Is matches ErrNonDeterminism.
func (e *NonDeterminismError) Is(target error) bool { return target == ErrNonDeterminism }

// InvalidDecisionError reports a decision that can never be valid: an empty or duplicate ID, a
// malformed input, a step scheduled again after it settled. Like a non-determinism error it blocks
// the run until fixed code is deployed.
type InvalidDecisionError struct {
	RunID string
	// Code is CodeInvalidDecision, CodeAlreadySettled, CodePanic or CodeNoDecision.
	Code   string
	Detail string
}

func (e *InvalidDecisionError) Error() string {
	return fmt.Sprintf("flow: [%s] invalid decision in run %q: %s", e.Code, e.RunID, e.Detail)
}

// Is matches ErrInvalidDecision.
func (e *InvalidDecisionError) Is(target error) bool { return target == ErrInvalidDecision }

// HistoryError reports an event that breaks a history invariant (DESIGN 3.2).
type HistoryError struct {
	RunID string
	Seq   uint64
	// Rule names the invariant: sequence, run_id, first_event, after_terminal, unknown_id,
	// duplicate_id, step_state, retry_order, unsettled_at_end, duplicate_delivery, hook_state,
	// child_state, cancel_state, cancel_parent.
	Rule   string
	Detail string
}

func (e *HistoryError) Error() string {
	return fmt.Sprintf("flow: [%s] invalid history of run %q at seq %d (%s): %s", CodeHistory, e.RunID, e.Seq, e.Rule, e.Detail)
}

// Is matches ErrInvalidHistory.
func (e *HistoryError) Is(target error) bool { return target == ErrInvalidHistory }
