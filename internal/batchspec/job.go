// Package batchspec describes batch jobs (docs/batch.md): their operations, specs, states and
// progress, and the transitions between them (Next). It is pure: the SDK (pkg/flow) and the
// wire types (internal/api) use it, and package internal/batch, which runs the jobs over
// FLOW_BATCHES, aliases it.
package batchspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/flowrun/flow/internal/filter"
	"github.com/flowrun/flow/pkg/event"
)

// Op is a batch job's operation.
type Op string

// The operations.
const (
	OpCancel    Op = "cancel"
	OpTerminate Op = "terminate"
	OpSignal    Op = "signal"
	OpReset     Op = "reset"
	OpPause     Op = "pause"
	OpUnpause   Op = "unpause"
)

// Ops lists the operations, in the documentation's order.
var Ops = []Op{OpCancel, OpTerminate, OpSignal, OpReset, OpPause, OpUnpause}

// State is where a job is in its life.
type State string

// The states.
const (
	StatePending   State = "pending"
	StateRunning   State = "running"
	StateCompleted State = "completed"
	StateStopped   State = "stopped"
	StateFailed    State = "failed"
)

// Ended reports whether st is final.
func (st State) Ended() bool {
	return st == StateCompleted || st == StateStopped || st == StateFailed
}

// Rates.
const (
	// DefaultRate is a job's rate when its Spec names none: operations per second.
	DefaultRate = 50
	// MaxRate bounds a job's rate.
	MaxRate = 10_000
)

// ChunkSize is the number of run IDs per target chunk.
const ChunkSize = 1000

// MaxNotes bounds the runs a job lists by name (Job.Failures, Job.Skips); the counts cover
// every run.
const MaxNotes = 100

// Spec is what a job does, fixed at creation.
type Spec struct {
	Op Op `json:"op"`
	// Where is the list filter (docs/search.md) selecting the runs, as `flow runs --where`.
	// Required: a job over every run says so (`status != "x"` is not it; write what you mean).
	Where string `json:"where"`
	// Definition narrows the runs to one definition, and the filter's attributes to its
	// declarations, as `flow runs --definition`. "" for every definition.
	Definition string `json:"definition,omitempty"`
	// Reason is recorded with each cancellation, termination, pause or reset.
	Reason string `json:"reason,omitempty"`
	// Signal and Payload are the signal's name and JSON payload (OpSignal).
	Signal  string          `json:"signal,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// Reset says where to reset each run to (OpReset).
	Reset *ResetSpec `json:"reset,omitempty"`
	// Rate is the operations per second; 0 is DefaultRate.
	Rate float64 `json:"rate,omitempty"`
}

// ResetSpec is how each run of a reset job is reset (docs/reset.md).
type ResetSpec struct {
	// Mode is seq, step, last_decision or rerun.
	Mode string `json:"mode"`
	// Seq (mode seq) and StepID (modes step and rerun) say where.
	Seq    uint64 `json:"seq,omitempty"`
	StepID string `json:"step_id,omitempty"`
	// Input replaces the input of the new run (mode rerun); nil keeps it.
	Input json.RawMessage `json:"input,omitempty"`
	// DropInputs drops the signals, hooks and updates recorded after the point.
	DropInputs bool `json:"drop_inputs,omitempty"`
}

// ErrInvalid is wrapped by the errors of a Spec that cannot run.
var ErrInvalid = errors.New("batch: invalid job")

// EffectiveRate returns the spec's rate, DefaultRate when it names none.
func (s Spec) EffectiveRate() float64 {
	if s.Rate == 0 {
		return DefaultRate
	}
	return s.Rate
}

// Validate checks the spec, but not its filter (which needs the definitions' declarations:
// Compile).
func (s Spec) Validate() error {
	if !slices.Contains(Ops, s.Op) {
		return fmt.Errorf("%w: unknown operation %q; use one of cancel, terminate, signal, reset, pause, unpause", ErrInvalid, s.Op)
	}
	if s.Where == "" {
		return fmt.Errorf("%w: no filter; say which runs with a where filter, e.g. status = \"running\" and definition = \"order\"", ErrInvalid)
	}
	if s.Rate < 0 || s.Rate > MaxRate {
		return fmt.Errorf("%w: rate %g is out of range; use 0 (the default, %d/s) up to %d operations per second", ErrInvalid, s.Rate, DefaultRate, MaxRate)
	}
	switch s.Op {
	case OpSignal:
		if err := event.ValidateName("signal", s.Signal); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if len(s.Payload) > 0 && !json.Valid(s.Payload) {
			return fmt.Errorf("%w: the signal's payload is not valid JSON", ErrInvalid)
		}
	case OpReset:
		if s.Reset == nil || !slices.Contains([]string{"seq", "step", "last_decision", "rerun"}, s.Reset.Mode) {
			return fmt.Errorf("%w: a reset job needs a mode: seq, step, last_decision or rerun", ErrInvalid)
		}
	}
	if s.Op != OpSignal && (s.Signal != "" || len(s.Payload) > 0) {
		return fmt.Errorf("%w: a signal name or payload on a %s job", ErrInvalid, s.Op)
	}
	if s.Op != OpReset && s.Reset != nil {
		return fmt.Errorf("%w: a reset point on a %s job", ErrInvalid, s.Op)
	}
	return nil
}

// Job is a batch job: its spec, state and progress, the value of its FLOW_BATCHES entry.
type Job struct {
	ID   string `json:"id"`
	Spec Spec   `json:"spec"`
	// Schema is the filter's schema as the creator compiled it: the declared attributes. The
	// executor compiles the filter with it, so that the job selects what its creator checked.
	Schema filter.Schema `json:"schema,omitzero"`
	State  State         `json:"state"`
	// CreatedAt is when the job was created: runs started after are never targets.
	CreatedAt time.Time `json:"created_at"`
	// StartedAt is when its targets were recorded; EndedAt when it reached a final state.
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at"`
	// Total is the number of targets, in Chunks chunks; Cursor the number done, in order.
	Total  int `json:"total"`
	Chunks int `json:"chunks"`
	Cursor int `json:"cursor"`
	// Applied counts the targets the operation was applied to; Skipped those it did not apply
	// to, by reason ("already completed", "cancellation already requested", ...); Failed those
	// whose operation failed.
	Applied int            `json:"applied"`
	Skipped map[string]int `json:"skipped,omitempty"`
	Failed  int            `json:"failed"`
	// Failures and Skips name the first MaxNotes failed and skipped runs.
	Failures []Note `json:"failures,omitempty"`
	Skips    []Note `json:"skips,omitempty"`
	// StopRequested is set by Stop; the executor stops at the end of its current window.
	StopRequested bool   `json:"stop_requested,omitempty"`
	StopReason    string `json:"stop_reason,omitempty"`
	// Error says why a failed job failed.
	Error string `json:"error,omitempty"`
	// Executor is the scheduler replica that last advanced the job.
	Executor string `json:"executor,omitempty"`
}

// Note is one run's result, named in a job's report.
type Note struct {
	RunID  string `json:"run_id"`
	Reason string `json:"reason"`
}

// Skipped total.
func (j *Job) SkippedTotal() int {
	n := 0
	for _, c := range j.Skipped {
		n += c
	}
	return n
}

// Rate is the job's observed rate: targets done per second since its targets were recorded.
func (j *Job) Rate(now time.Time) float64 {
	if j.StartedAt.IsZero() || j.Cursor == 0 {
		return 0
	}
	end := now
	if !j.EndedAt.IsZero() {
		end = j.EndedAt
	}
	d := end.Sub(j.StartedAt).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(j.Cursor) / d
}

// Outcome is what an operation did to one target.
type Outcome string

// The outcomes.
const (
	Applied Outcome = "applied"
	Skipped Outcome = "skipped"
	Failed  Outcome = "failed"
)

// Result is one target's outcome, with the skip reason or the error.
type Result struct {
	RunID   string
	Outcome Outcome
	Reason  string
}

// Event is a change to a job, as Next applies it.
type Event struct {
	Kind EventKind
	At   time.Time
	// Total and Chunks (EventResolved): the targets recorded.
	Total, Chunks int
	// From and Results (EventProgress): the window's first index and its results, in order.
	From    int
	Results []Result
	// Reason: why the job is stopped (EventStopRequested) or failed (EventFailed).
	Reason string
	// Executor names the replica that makes the change.
	Executor string
}

// EventKind names a change.
type EventKind string

// The changes.
const (
	// EventResolved: the targets are recorded.
	EventResolved EventKind = "resolved"
	// EventProgress: a window of targets is done.
	EventProgress EventKind = "progress"
	// EventCompleted: every target is done.
	EventCompleted EventKind = "completed"
	// EventStopRequested: an operator asks the job to stop.
	EventStopRequested EventKind = "stop_requested"
	// EventStopped: the executor stops the job (at its request).
	EventStopped EventKind = "stopped"
	// EventFailed: the job cannot go on.
	EventFailed EventKind = "failed"
)

// ErrTransition is wrapped by Next's errors.
var ErrTransition = errors.New("batch: transition not allowed")

// Next returns j after ev, or an error wrapping ErrTransition when j's state does not allow it
// (which j is left as it was). It is the whole state machine of a job; the store writes its
// result with a compare-and-set.
func Next(j Job, ev Event) (Job, error) {
	refuse := func(why string) (Job, error) {
		return j, fmt.Errorf("%w: %s on a %s job %q: %s", ErrTransition, ev.Kind, j.State, j.ID, why)
	}
	if j.State.Ended() {
		if ev.Kind == EventStopRequested {
			return j, nil // stopping an ended job changes nothing
		}
		return refuse("it ended")
	}
	j.UpdatedAt = ev.At
	if ev.Executor != "" {
		j.Executor = ev.Executor
	}
	switch ev.Kind {
	case EventResolved:
		if j.State != StatePending {
			return refuse("its targets are recorded already")
		}
		if ev.Total < 0 || ev.Chunks != (ev.Total+ChunkSize-1)/ChunkSize {
			return refuse(fmt.Sprintf("%d targets cannot be in %d chunks", ev.Total, ev.Chunks))
		}
		j.State, j.StartedAt, j.Total, j.Chunks, j.Cursor = StateRunning, ev.At, ev.Total, ev.Chunks, 0
	case EventProgress:
		if j.State != StateRunning {
			return refuse("it is not running")
		}
		if ev.From != j.Cursor {
			return refuse(fmt.Sprintf("the window starts at %d, the cursor is at %d", ev.From, j.Cursor))
		}
		if j.Cursor+len(ev.Results) > j.Total {
			return refuse(fmt.Sprintf("%d results after %d of %d targets", len(ev.Results), j.Cursor, j.Total))
		}
		j.Skipped = maps(j.Skipped)
		j.Failures, j.Skips = slices.Clone(j.Failures), slices.Clone(j.Skips)
		for _, r := range ev.Results {
			switch r.Outcome {
			case Applied:
				j.Applied++
			case Skipped:
				j.Skipped[r.Reason]++
				if len(j.Skips) < MaxNotes {
					j.Skips = append(j.Skips, Note{RunID: r.RunID, Reason: r.Reason})
				}
			case Failed:
				j.Failed++
				if len(j.Failures) < MaxNotes {
					j.Failures = append(j.Failures, Note{RunID: r.RunID, Reason: r.Reason})
				}
			default:
				return refuse(fmt.Sprintf("run %q has no outcome", r.RunID))
			}
		}
		j.Cursor += len(ev.Results)
	case EventCompleted:
		if j.State != StateRunning || j.Cursor != j.Total {
			return refuse(fmt.Sprintf("%d of %d targets are done", j.Cursor, j.Total))
		}
		j.State, j.EndedAt = StateCompleted, ev.At
	case EventStopRequested:
		j.StopRequested, j.StopReason = true, ev.Reason
		if j.State == StatePending {
			// Nothing was touched: it stops at once.
			j.State, j.EndedAt = StateStopped, ev.At
		}
	case EventStopped:
		if !j.StopRequested {
			return refuse("nobody asked it to stop")
		}
		j.State, j.EndedAt = StateStopped, ev.At
	case EventFailed:
		j.State, j.EndedAt, j.Error = StateFailed, ev.At, ev.Reason
	default:
		return refuse("unknown change")
	}
	return j, nil
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// DeliveryID is the delivery ID of job jobID's operation on run runID: the same for every
// repeat, distinct across jobs.
func DeliveryID(jobID, runID string) string { return "batch:" + jobID + ":" + runID }

// ValidateID checks a job ID: 1-128 letters, digits, '-' or '_' (it becomes a key token).
func ValidateID(id string) error {
	if err := event.ValidateRunID(id); err != nil {
		return fmt.Errorf("%w: job ID: %w", ErrInvalid, err)
	}
	return nil
}
