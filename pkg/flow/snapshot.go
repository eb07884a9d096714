package flow

import (
	"cmp"
	"encoding/json"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// Snapshot is a read-only view of a run's history as projected at one sequence: status, steps,
// waits, signals, hooks, children, updates, progress and terminal outcome. It is rebuilt from
// history and never a second truth; changing it changes nothing in the run.
//
// Its fields and JSON encoding are those of the snapshot the history service answers
// ([Client.Snapshot], [Client.Describe]), so a snapshot read as JSON decodes into it. Maps are
// keyed by the decision ID the workflow chose. A Snapshot from [Context.Snapshot] shares its
// payload bytes with the worker's projection: read them, never write into them.
type Snapshot struct {
	// RunID is the run's ID.
	RunID string `json:"run_id"`
	// Seq is the sequence of the last event the snapshot projects.
	Seq uint64 `json:"seq"`
	// Status is the run's status at Seq.
	Status Status `json:"status"`
	// StartedAt is the recorded time of the run's start; UpdatedAt that of the event at Seq.
	StartedAt time.Time `json:"started_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Spec is the code identity the run is decided with: its definition, build and patches.
	Spec event.Spec `json:"spec"`
	// Input is the run's input (JSON).
	Input json.RawMessage `json:"input"`
	// Queue is the task queue whose workers drive the run; empty for the default queue.
	Queue string `json:"queue,omitempty"`
	// Parent links a child run to its parent run; nil for a run a client started.
	Parent *event.ParentRef `json:"parent,omitempty"`
	// ContinuedFrom is the run this one continues as new, and Generation counts the
	// continuations; empty and 0 for a run that continues none.
	ContinuedFrom string `json:"continued_from,omitempty"`
	Generation    int    `json:"generation,omitempty"`

	// Steps holds the run's scheduled steps by step ID.
	Steps map[string]*RunStep `json:"steps"`
	// Waits holds the run's durable timers by wait ID.
	Waits map[string]*RunWait `json:"waits"`
	// SignalWaits holds the run's waits for a signal by wait ID.
	SignalWaits map[string]*RunSignalWait `json:"signal_waits"`
	// Signals are the received signals, in the order received.
	Signals []*RunSignal `json:"signals"`
	// Hooks holds the run's hooks by hook ID.
	Hooks map[string]*RunHook `json:"hooks"`
	// Children holds the run's child workflows by child ID.
	Children map[string]*RunChild `json:"children"`

	// CancelRequested is set once cancellation of the run was requested, with CancelReason the
	// request's reason.
	CancelRequested bool   `json:"cancel_requested"`
	CancelReason    string `json:"cancel_reason,omitempty"`
	// Blocked describes the latest failed decision while the run is blocked; nil otherwise.
	Blocked *RunBlocked `json:"blocked,omitempty"`
	// Outcome is the run's terminal outcome; nil while the run is active.
	Outcome *RunOutcome `json:"outcome,omitempty"`
	// Progress counts what the run has done and what it waits on.
	Progress RunProgress `json:"progress"`
	// SideEffects holds the values ctx.SideEffect recorded, by side effect ID.
	SideEffects map[string]*RunSideEffect `json:"side_effects,omitempty"`
	// Attributes are the run's search attributes now: those it started with, each replaced by
	// the latest upsert that set it. Empty for none.
	Attributes event.Attributes `json:"attributes,omitempty"`
	// Upserts are the recorded UpsertAttributes decisions by upsert ID.
	Upserts map[string]*RunUpsert `json:"upserts,omitempty"`
	// Updates holds the run's updates by update ID; nil before the first.
	Updates map[string]*Update `json:"updates,omitempty"`

	// Delayed is set while the run waits out its start delay, until NotBefore.
	Delayed   bool      `json:"delayed,omitempty"`
	NotBefore time.Time `json:"not_before,omitzero"`
	// StartPolicy is the record of the start policies the run started under.
	StartPolicy *event.StartPolicy `json:"start_policy,omitempty"`
	// Debounced counts the starts collapsed into the run.
	Debounced int `json:"debounced,omitempty"`

	// Priority is the run's priority (higher first).
	Priority int `json:"priority,omitempty"`
	// Control is the flow control the run started under; nil for none.
	Control *event.FlowControl `json:"control,omitempty"`
	// Admitted is set once flow control admitted the run, at sequence AdmittedSeq and time
	// AdmittedAt.
	Admitted    bool      `json:"admitted,omitempty"`
	AdmittedSeq uint64    `json:"admitted_seq,omitempty"`
	AdmittedAt  time.Time `json:"admitted_at,omitzero"`
	// Timeouts are the run's timeouts and the deadlines they give; nil for none.
	Timeouts *event.RunTimeouts `json:"timeouts,omitempty"`
	// Schedule is the schedule that started the run; nil for a run no schedule started.
	Schedule *event.ScheduleRef `json:"schedule,omitempty"`

	// ResetFrom is the reset that created the run; nil for a run that is not a reset.
	ResetFrom *event.ResetFrom `json:"reset_from,omitempty"`
	// Resets are the resets of this run, oldest first: each names the new run.
	Resets []RunReset `json:"resets,omitempty"`
	// Paused is the run's current pause; nil when it is not paused. Pauses counts the pauses
	// recorded.
	Paused *RunPause `json:"paused,omitempty"`
	Pauses int       `json:"pauses,omitempty"`
}

// StepStatus is the state of one step.
type StepStatus = core.StepStatus

// Step statuses.
const (
	// StepRunning: an attempt is in flight (running, or about to be run).
	StepRunning = core.StepRunning
	// StepRetrying: an attempt failed; the next one waits for its backoff (RunStep.RetryDue).
	StepRetrying  = core.StepRetrying
	StepCompleted = core.StepCompleted
	StepFailed    = core.StepFailed
	StepCancelled = core.StepCancelled
)

// RunStep is one scheduled step of a run.
type RunStep struct {
	// ID is the step's ID, unique in the run.
	ID string `json:"id"`
	// Name is the registered step function the step runs.
	Name string `json:"name"`
	// Input is the step's input (JSON).
	Input json.RawMessage `json:"input"`
	// Retry is the step's retry policy, normalized.
	Retry RetryPolicy `json:"retry"`
	// BatchSeq is the sequence of the event that scheduled the step with its batch.
	BatchSeq uint64 `json:"batch_seq"`
	// Status is the step's state.
	Status StepStatus `json:"status"`
	// Attempt is the attempt in flight, due next, or last run once settled (from 1).
	Attempt int `json:"attempt"`
	// RetryDue is when the next attempt of a retrying step is due.
	RetryDue time.Time `json:"retry_due,omitzero"`
	// Output is the result (JSON) of a completed step.
	Output json.RawMessage `json:"output,omitempty"`
	// Error is the error of a failed step's last attempt, or of a retrying step's failed one.
	Error *event.ErrorInfo `json:"error,omitempty"`
	// SideEffectUnknown is set when the step was cancelled while an attempt may have run.
	SideEffectUnknown bool `json:"side_effect_unknown,omitempty"`
	// SettledSeq is the sequence of the event that settled the step; 0 while it is not settled.
	SettledSeq uint64 `json:"settled_seq,omitempty"`
	// Timeouts are the step's per-attempt timeouts; nil for none.
	Timeouts *event.StepTimeouts `json:"timeouts,omitempty"`
	// Cancellation is the policy the workflow cancelled the step with, recorded at CancelSeq;
	// empty if it did not.
	Cancellation Cancellation `json:"cancellation,omitempty"`
	CancelSeq    uint64       `json:"cancel_seq,omitempty"`
	// Held is set while the step, which exhausted its attempts under a pausing policy, waits for
	// the run's unpause to get a fresh attempt (docs/pause.md).
	Held bool `json:"held,omitempty"`
}

// RunWait is one durable timer of a run.
type RunWait struct {
	// ID is the timer's ID in the run.
	ID string `json:"id"`
	// Deadline is when the timer fires.
	Deadline time.Time `json:"deadline"`
	// Duration is what the workflow asked to sleep for, when it gave a duration.
	Duration event.Duration `json:"duration,omitempty"`
	// Seq is the sequence of the event that scheduled the timer.
	Seq uint64 `json:"seq"`
	// Fired is set once the deadline passed, at sequence FiredSeq.
	Fired    bool   `json:"fired"`
	FiredSeq uint64 `json:"fired_seq,omitempty"`
}

// RunSignalWait is one wait of a run for a signal.
type RunSignalWait struct {
	// ID is the wait's ID in the run.
	ID string `json:"id"`
	// Name is the signal waited for.
	Name string `json:"name"`
	// Seq is the sequence of the event that began the wait.
	Seq uint64 `json:"seq"`
	// Signal indexes Snapshot.Signals once a signal is bound to this wait, else -1.
	Signal int `json:"signal"`
}

// Received reports whether a signal has been bound to the wait.
func (w *RunSignalWait) Received() bool { return w.Signal >= 0 }

// RunSignal is one signal a run received.
type RunSignal struct {
	// Name is the signal's name.
	Name string `json:"name"`
	// Payload is the signal's data (JSON).
	Payload json.RawMessage `json:"payload"`
	// DeliveryID identifies the delivery, so that a repeated delivery is recorded once.
	DeliveryID string `json:"delivery_id"`
	// Seq is the sequence of the event that recorded the signal.
	Seq uint64 `json:"seq"`
	// ConsumedBy is the signal wait the signal is bound to; empty while buffered.
	ConsumedBy string `json:"consumed_by,omitempty"`
}

// RunHook is one hook of a run. Token is redacted unless the snapshot was read with
// [SecretClient.Snapshot].
type RunHook struct {
	// ID is the hook's ID in the run.
	ID string `json:"id"`
	// Token is the secret that routes a delivery to the hook.
	Token string `json:"token"`
	// Metadata is what the workflow attached to the hook (JSON), if anything.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Seq is the sequence of the event that created the hook.
	Seq uint64 `json:"seq"`
	// Received is set once a delivery reached the hook: Payload is its data (JSON), DeliveryID
	// identifies it (a repeated delivery is recorded once) and ReceivedSeq is the sequence of
	// the event that recorded it.
	Received    bool            `json:"received"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	DeliveryID  string          `json:"delivery_id,omitempty"`
	ReceivedSeq uint64          `json:"received_seq,omitempty"`
}

// RunChild is one child workflow of a run.
type RunChild struct {
	// ID is the child's ID, unique in the run.
	ID string `json:"id"`
	// RunID is the child run's ID.
	RunID string `json:"run_id"`
	// Definition is the child's workflow.
	Definition string `json:"definition"`
	// Input is the child's input (JSON).
	Input json.RawMessage `json:"input"`
	// CancelPolicy says what the run's end does to the child while the child runs.
	CancelPolicy event.CancelPolicy `json:"cancel_policy"`
	// BuildID and Patches are the spec the child run starts with.
	BuildID string   `json:"build_id,omitempty"`
	Patches []string `json:"patches,omitempty"`
	// BatchSeq is the sequence of the event that scheduled the child with its batch.
	BatchSeq uint64 `json:"batch_seq"`
	// Settled is set once the child's run ended, with Outcome how.
	Settled bool          `json:"settled"`
	Outcome event.Outcome `json:"outcome,omitempty"`
	// EndedRunID is the run that ended: RunID or its last continuation.
	EndedRunID string `json:"ended_run_id,omitempty"`
	// Output is the result (JSON) of a child that completed; Error the error of one that failed.
	Output json.RawMessage  `json:"output,omitempty"`
	Error  *event.ErrorInfo `json:"error,omitempty"`
	// SettledSeq is the sequence of the event that settled the child; 0 while it is not settled.
	SettledSeq uint64 `json:"settled_seq,omitempty"`
	// Retry is the child's retry policy; nil for none. Attempt is the attempt running or due
	// next (0: the first), AttemptRunID its run, and RetryDue when an attempt waiting out its
	// backoff is due.
	Retry        *RetryPolicy `json:"retry,omitempty"`
	Attempt      int          `json:"attempt,omitempty"`
	AttemptRunID string       `json:"attempt_run_id,omitempty"`
	RetryDue     time.Time    `json:"retry_due,omitzero"`
	// Cancellation is the policy the workflow cancelled the child with, recorded at CancelSeq;
	// empty if it did not.
	Cancellation Cancellation `json:"cancellation,omitempty"`
	CancelSeq    uint64       `json:"cancel_seq,omitempty"`
}

// CancelPending reports whether a WaitCancelled cancellation of the step waits for its attempt
// to end.
func (st *RunStep) CancelPending() bool { return st.CancelSeq != 0 && !st.Status.Settled() }

// CancelPending reports whether a WaitCancelled cancellation of the child waits for its run to
// end.
func (c *RunChild) CancelPending() bool { return c.CancelSeq != 0 && !c.Settled }

// RunBlocked describes the latest failed decision of a blocked run.
type RunBlocked struct {
	// Kind classifies the failure (a panic, an error, non-determinism, ...); Code is its stable
	// code (FLOW-REPLAY-2, ...) and Detail its message.
	Kind   string `json:"kind"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	// BuildID is the build of the worker whose decision failed.
	BuildID string `json:"build_id,omitempty"`
	// Seq is the sequence of the event that recorded the failure.
	Seq uint64 `json:"seq"`
	// Mismatch is what differs, for a non-determinism failure.
	Mismatch *event.Mismatch `json:"mismatch,omitempty"`
}

// RunOutcome is the terminal outcome of a run: its output (completed), error (failed), reason
// and cause (cancelled), or successor and its input (continued as new).
type RunOutcome struct {
	// Outcome is how the run ended: completed, failed, cancelled or continued as new.
	Outcome event.Outcome `json:"outcome"`
	// Output is a completed run's result (JSON).
	Output json.RawMessage `json:"output,omitempty"`
	// Error is a failed run's error.
	Error *event.ErrorInfo `json:"error,omitempty"`
	// Reason is a cancelled run's cancellation reason.
	Reason string `json:"reason,omitempty"`
	// Cause says who or what ended the run (the workflow, an operator, a timeout, ...).
	Cause event.Cause `json:"cause,omitempty"`
	// SuccessorRunID is the run that continues a run that continued as new, and Input the
	// successor's input (JSON).
	SuccessorRunID string          `json:"successor_run_id,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	// Seq and Time are the sequence and recorded time of the event that ended the run.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
}

// RunProgress counts what a run has done and what it waits on.
type RunProgress struct {
	// Events counts the events of the run's history; Decisions the decisions recorded in it.
	Events    uint64 `json:"events"`
	Decisions int    `json:"decisions"`
	// Steps counts the steps scheduled; StepsRunning, StepsRetrying, StepsCompleted,
	// StepsFailed and StepsCancelled count those in each status.
	Steps          int `json:"steps"`
	StepsRunning   int `json:"steps_running"`
	StepsRetrying  int `json:"steps_retrying"`
	StepsCompleted int `json:"steps_completed"`
	StepsFailed    int `json:"steps_failed"`
	StepsCancelled int `json:"steps_cancelled"`
	// WaitsPending and WaitsFired count the durable timers not fired yet and fired.
	WaitsPending int `json:"waits_pending"`
	WaitsFired   int `json:"waits_fired"`
	// SignalsReceived counts the signals received; SignalWaits the signal waits no signal is
	// bound to yet.
	SignalsReceived int `json:"signals_received"`
	SignalWaits     int `json:"signal_waits_pending"`
	// HooksPending and HooksReceived count the hooks waiting for a delivery and delivered to.
	HooksPending  int `json:"hooks_pending"`
	HooksReceived int `json:"hooks_received"`
	// ChildrenPending and ChildrenSettled count the child workflows not settled yet and settled.
	ChildrenPending int `json:"children_pending"`
	ChildrenSettled int `json:"children_settled"`
}

// RunSideEffect is one value ctx.SideEffect recorded.
type RunSideEffect struct {
	// ID is the side effect's ID in the run.
	ID string `json:"id"`
	// Value is the recorded result (JSON), which every replay reads instead of running the side
	// effect again.
	Value json.RawMessage `json:"value"`
	// Seq is the sequence of the event that recorded the value.
	Seq uint64 `json:"seq"`
}

// RunUpsert is one recorded UpsertAttributes decision.
type RunUpsert struct {
	// ID is the upsert's ID in the run.
	ID string `json:"id"`
	// Attributes are the search attributes the upsert set.
	Attributes event.Attributes `json:"attributes"`
	// Seq is the sequence of the event that recorded the upsert.
	Seq uint64 `json:"seq"`
}

// RunReset is one reset of a run: the new run it created, from which point and how.
type RunReset struct {
	// NewRunID is the run the reset created.
	NewRunID string `json:"new_run_id"`
	// Point is the reset point: the sequence of this run's last event copied into the new run.
	Point uint64 `json:"point"`
	// Mode is how the reset point was chosen.
	Mode event.ResetMode `json:"mode"`
	// StepID is the step run again, for a step reset or a rerun.
	StepID string `json:"step_id,omitempty"`
	// Reason is the operator's reason for the reset.
	Reason string `json:"reason,omitempty"`
	// DropInputs is set when the inputs after the point were dropped instead of reapplied.
	DropInputs bool `json:"drop_inputs,omitempty"`
	// Terminated is set when the reset ended this run (it was active).
	Terminated bool `json:"terminated,omitempty"`
	// InputReplaced is set for a rerun with a new input.
	InputReplaced bool `json:"input_replaced,omitempty"`
	// Seq is the sequence of the event that recorded the reset in this run.
	Seq uint64 `json:"seq"`
}

// RunPause is a run's current pause: why, by whom, since when, and the steps that get a fresh
// attempt when it is unpaused.
type RunPause struct {
	// Reason says why the run was paused.
	Reason string `json:"reason,omitempty"`
	// Cause is what paused the run: an operator, or a step's exhausted attempts.
	Cause event.PauseCause `json:"cause"`
	// By names who paused the run (an operator, a batch job); empty for a step's exhaustion.
	By string `json:"by,omitempty"`
	// Seq and At are the sequence and time of the event that began the pause.
	Seq uint64    `json:"seq"`
	At  time.Time `json:"at"`
	// Steps are the steps that exhausted their attempts during the pause (or caused it).
	Steps []HeldStep `json:"steps,omitempty"`
}

// Describe says why the run runID is paused and what unpauses it, as `flow status` shows it.
func (p *RunPause) Describe(runID string) string {
	cp := core.Pause{Reason: p.Reason, Cause: p.Cause, By: p.By, Seq: p.Seq, At: p.At}
	for _, h := range p.Steps {
		cp.Steps = append(cp.Steps, core.HeldStep(h))
	}
	return cp.Describe(runID)
}

// HeldStep is a step that exhausted its attempts under a pausing policy.
type HeldStep struct {
	// StepID is the step's ID.
	StepID string `json:"step_id"`
	// Attempt is the step's last attempt, and Error that attempt's error.
	Attempt int             `json:"attempt"`
	Error   event.ErrorInfo `json:"error"`
}

// Update is one update of a run as its history records it: ID, name, payload, status and, once
// completed, its result or error. See docs/updates.md.
type Update struct {
	// ID is the update's ID in the run.
	ID string `json:"id"`
	// Name is the update's name, which selects the workflow's handler.
	Name string `json:"name"`
	// Payload is the update's data (JSON).
	Payload json.RawMessage `json:"payload"`
	// Seq is the sequence of the update's receipt.
	Seq uint64 `json:"seq"`
	// Status is the update's state.
	Status UpdateStatus `json:"status"`
	// DecidedSeq is the sequence of the update's acceptance or rejection.
	DecidedSeq uint64 `json:"decided_seq,omitempty"`
	// Result is a completed update's result (JSON); Error the error of a rejected or failed one.
	Result json.RawMessage  `json:"result,omitempty"`
	Error  *event.ErrorInfo `json:"error,omitempty"`
	// SettledSeq is the sequence of the update's rejection or completion.
	SettledSeq uint64 `json:"settled_seq,omitempty"`
}

// Settled reports whether the update's outcome is recorded: rejected, completed or aborted.
func (u *Update) Settled() bool {
	return u.Status == UpdateRejected || u.Status == UpdateCompleted || u.Status == UpdateAborted
}

// Open reports whether the update was accepted and waits for its result.
func (u *Update) Open() bool { return u.Status == UpdateAccepted }

// Terminal reports whether the run has ended.
func (s *Snapshot) Terminal() bool { return s.Outcome != nil }

// IsPaused reports whether the run is paused (and has not ended).
func (s *Snapshot) IsPaused() bool { return s.Paused != nil && s.Outcome == nil }

// Queued reports whether the run waits for admission under flow control.
func (s *Snapshot) Queued() bool { return s.Control != nil && !s.Admitted && s.Outcome == nil }

// QueuedReason says why a queued run waits ("" for a run without flow control).
func (s *Snapshot) QueuedReason() string {
	if s.Control == nil {
		return ""
	}
	return "waiting for admission under flow control (" + s.Control.Describe() + ")"
}

// UpdateList returns the run's updates in the order they were received.
func (s *Snapshot) UpdateList() []*Update {
	out := slices.Collect(maps.Values(s.Updates))
	slices.SortFunc(out, func(a, b *Update) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// payloadFields returns the addresses of the snapshot's payload fields, which hold a
// reference where history holds one (docs/large-payloads.md): the run's input, its outcome's
// output and continue-as-new input, the steps' inputs and outputs, the signals' payloads, the
// hooks' metadata and payloads, the children's inputs and outputs, the updates' payloads and
// results and the side effects' values. s must not change while the sequence is iterated.
func (s *Snapshot) payloadFields() iter.Seq[*json.RawMessage] {
	return func(yield func(*json.RawMessage) bool) {
		if !yield(&s.Input) {
			return
		}
		if o := s.Outcome; o != nil {
			if !yield(&o.Output) || !yield(&o.Input) {
				return
			}
		}
		for _, st := range s.Steps {
			if !yield(&st.Input) || !yield(&st.Output) {
				return
			}
		}
		for _, sig := range s.Signals {
			if !yield(&sig.Payload) {
				return
			}
		}
		for _, h := range s.Hooks {
			if !yield(&h.Metadata) || !yield(&h.Payload) {
				return
			}
		}
		for _, ch := range s.Children {
			if !yield(&ch.Input) || !yield(&ch.Output) {
				return
			}
		}
		for _, u := range s.Updates {
			if !yield(&u.Payload) || !yield(&u.Result) {
				return
			}
		}
		for _, se := range s.SideEffects {
			if !yield(&se.Value) {
				return
			}
		}
	}
}

// viewOf returns the read-only view of the core projection s. Maps and records are copied;
// payload bytes and the event records the fields point to are shared with s. The conversions of
// records whose fields are those of core's keep the two in step: a field added to one and not
// the other fails to compile here.
func viewOf(s *core.Snapshot) *Snapshot {
	if s == nil {
		return nil
	}
	v := &Snapshot{
		RunID: s.RunID, Seq: s.Seq, Status: s.Status, StartedAt: s.StartedAt, UpdatedAt: s.UpdatedAt,
		Spec: s.Spec, Input: s.Input, Queue: s.Queue, Parent: s.Parent, ContinuedFrom: s.ContinuedFrom,
		Generation: s.Generation,
		Steps:      make(map[string]*RunStep, len(s.Steps)), Waits: make(map[string]*RunWait, len(s.Waits)),
		SignalWaits: make(map[string]*RunSignalWait, len(s.SignalWaits)), Signals: make([]*RunSignal, len(s.Signals)),
		Hooks: make(map[string]*RunHook, len(s.Hooks)), Children: make(map[string]*RunChild, len(s.Children)),
		CancelRequested: s.CancelRequested, CancelReason: s.CancelReason, Progress: RunProgress(s.Progress),
		Attributes: s.Attributes, Delayed: s.Delayed, NotBefore: s.NotBefore, StartPolicy: s.StartPolicy,
		Debounced: s.Debounced, Priority: s.Priority, Control: s.Control, Admitted: s.Admitted,
		AdmittedSeq: s.AdmittedSeq, AdmittedAt: s.AdmittedAt, Timeouts: s.Timeouts, Schedule: s.Schedule, ResetFrom: s.ResetFrom,
		Pauses: s.Pauses,
	}
	for id, st := range s.Steps {
		v.Steps[id] = &RunStep{ID: st.ID, Name: st.Name, Input: st.Input, Retry: st.Retry, BatchSeq: st.BatchSeq,
			Status: st.Status, Attempt: st.Attempt, RetryDue: st.RetryDue, Output: st.Output, Error: st.Error,
			SideEffectUnknown: st.SideEffectUnknown, SettledSeq: st.SettledSeq, Timeouts: st.Timeouts,
			Cancellation: st.Cancellation, CancelSeq: st.CancelSeq, Held: st.Held}
	}
	for id, w := range s.Waits {
		v.Waits[id] = new(RunWait(*w))
	}
	for id, w := range s.SignalWaits {
		v.SignalWaits[id] = new(RunSignalWait(*w))
	}
	for i, sig := range s.Signals {
		v.Signals[i] = new(RunSignal(*sig))
	}
	for id, h := range s.Hooks {
		v.Hooks[id] = new(RunHook(*h))
	}
	for id, ch := range s.Children {
		v.Children[id] = &RunChild{ID: ch.ID, RunID: ch.RunID, Definition: ch.Definition, Input: ch.Input,
			CancelPolicy: ch.CancelPolicy, BuildID: ch.BuildID, Patches: ch.Patches, BatchSeq: ch.BatchSeq,
			Settled: ch.Settled, Outcome: ch.Outcome, EndedRunID: ch.EndedRunID, Output: ch.Output, Error: ch.Error,
			SettledSeq: ch.SettledSeq, Retry: ch.Retry, Attempt: ch.Attempt, AttemptRunID: ch.AttemptRunID,
			RetryDue: ch.RetryDue, Cancellation: ch.Cancellation, CancelSeq: ch.CancelSeq}
	}
	if s.Blocked != nil {
		v.Blocked = new(RunBlocked(*s.Blocked))
	}
	if s.Outcome != nil {
		v.Outcome = new(RunOutcome(*s.Outcome))
	}
	if s.SideEffects != nil {
		v.SideEffects = make(map[string]*RunSideEffect, len(s.SideEffects))
		for id, se := range s.SideEffects {
			v.SideEffects[id] = new(RunSideEffect(*se))
		}
	}
	if s.Upserts != nil {
		v.Upserts = make(map[string]*RunUpsert, len(s.Upserts))
		for id, u := range s.Upserts {
			v.Upserts[id] = new(RunUpsert(*u))
		}
	}
	if s.Updates != nil {
		v.Updates = make(map[string]*Update, len(s.Updates))
		for id, u := range s.Updates {
			v.Updates[id] = updateOf(u)
		}
	}
	if s.Resets != nil {
		v.Resets = make([]RunReset, len(s.Resets))
		for i, r := range s.Resets {
			v.Resets[i] = RunReset(r)
		}
	}
	if p := s.Paused; p != nil {
		v.Paused = &RunPause{Reason: p.Reason, Cause: p.Cause, By: p.By, Seq: p.Seq, At: p.At}
		for _, h := range p.Steps {
			v.Paused.Steps = append(v.Paused.Steps, HeldStep(h))
		}
	}
	return v
}

// updateOf returns the view of update u.
func updateOf(u *core.Update) *Update {
	if u == nil {
		return nil
	}
	return new(Update(*u))
}
