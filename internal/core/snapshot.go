package core

import (
	"encoding/json"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// Status is a run's state as projected from its history.
type Status string

// Active statuses.
const (
	// StatusPending: started, no decision recorded yet.
	StatusPending Status = "pending"
	// StatusRunning: a step attempt is in flight, or a decision is due.
	StatusRunning Status = "running"
	// StatusSuspended: waiting only on time, a retry backoff, a signal, a hook or a child.
	StatusSuspended Status = "suspended"
	// StatusCancelling: cancellation requested; the run has not ended yet.
	StatusCancelling Status = "cancelling"
	// StatusBlocked: the latest decision failed (decision.failed) and none has succeeded since.
	StatusBlocked Status = "blocked"
	// StatusQueued: started under flow control and not admitted yet (no run.admitted).
	StatusQueued Status = "queued"
	// StatusPaused: paused (run.paused) and not unpaused since; see Snapshot.Paused.
	StatusPaused Status = "paused"
)

// Terminal statuses, one per event.Outcome.
const (
	StatusCompleted      Status = "completed"
	StatusFailed         Status = "failed"
	StatusCancelled      Status = "cancelled"
	StatusContinuedAsNew Status = "continued_as_new"
)

// Terminal reports whether s is a terminal status.
func (s Status) Terminal() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusContinuedAsNew:
		return true
	}
	return false
}

// StepStatus is the state of one step.
type StepStatus string

const (
	// StepRunning: an attempt is in flight (it may be running, or about to be run).
	StepRunning StepStatus = "running"
	// StepRetrying: an attempt failed; the next one waits for its backoff (RetryDue).
	StepRetrying  StepStatus = "retrying"
	StepCompleted StepStatus = "completed"
	StepFailed    StepStatus = "failed"
	StepCancelled StepStatus = "cancelled"
)

// Settled reports whether the step will not run again.
func (s StepStatus) Settled() bool {
	return s == StepCompleted || s == StepFailed || s == StepCancelled
}

// Step is the projection of one scheduled step.
type Step struct {
	ID    string            `json:"id"`
	Name  string            `json:"name"`
	Input json.RawMessage   `json:"input"`
	Retry event.RetryPolicy `json:"retry"`
	// BatchSeq is the sequence of the step.scheduled event that scheduled it.
	BatchSeq uint64     `json:"batch_seq"`
	Status   StepStatus `json:"status"`
	// Attempt is the attempt in flight, due next, or last run once settled.
	Attempt  int       `json:"attempt"`
	RetryDue time.Time `json:"retry_due,omitzero"`
	// RetrySeq is the sequence of the step.retry_scheduled event of the attempt due next.
	RetrySeq uint64           `json:"retry_seq,omitempty"`
	Output   json.RawMessage  `json:"output,omitempty"`
	Error    *event.ErrorInfo `json:"error,omitempty"`
	// SideEffectUnknown is set when the step was cancelled while an attempt may have run.
	SideEffectUnknown bool   `json:"side_effect_unknown,omitempty"`
	SettledSeq        uint64 `json:"settled_seq,omitempty"`
	// Timeouts are the step's recorded per-attempt timeouts (docs/timeouts.md); nil for none.
	Timeouts *event.StepTimeouts `json:"timeouts,omitempty"`
	// InFlightSince and InFlightSeq are the recorded time and the sequence of the event that put
	// the current attempt in flight (step.scheduled or step.retry_fired). They are kept for
	// steps with timeouts only: the schedule-to-start timeout counts from them.
	InFlightSince time.Time `json:"in_flight_since,omitzero"`
	InFlightSeq   uint64    `json:"in_flight_seq,omitempty"`
	// Cancellation is the policy of the workflow's ctx.CancelStep, recorded at CancelSeq (its
	// step.cancelled or step.cancel_requested); empty if the workflow never cancelled the step.
	// A wait_cancelled cancellation is pending until the step settles (CancelPending).
	Cancellation event.Cancellation `json:"cancellation,omitempty"`
	CancelSeq    uint64             `json:"cancel_seq,omitempty"`

	// pos is the step's position in its batch.
	pos int
	// vetted is set when the recorded ID, name and retry policy are what Validate would record
	// for them (valid, and the policy normalized), so that a re-issued member equal to them byte
	// for byte is known valid without validating it again.
	vetted bool
	// prev and next link the unsettled steps in scheduling order (Snapshot.unsettled).
	prev, next *Step

	// Held is set while the step, which exhausted its attempts under ExhaustionPauseRun, waits
	// for the run's unpause to schedule its fresh attempt (docs/pause.md).
	Held bool `json:"held,omitempty"`
}

// Position returns the step's position in its batch, from 0: with BatchSeq, its scheduling
// order.
func (st *Step) Position() int { return st.pos }

// Wait is the projection of one durable timer.
type Wait struct {
	ID       string         `json:"id"`
	Deadline time.Time      `json:"deadline"`
	Duration event.Duration `json:"duration,omitempty"`
	Seq      uint64         `json:"seq"`
	Fired    bool           `json:"fired"`
	FiredSeq uint64         `json:"fired_seq,omitempty"`
}

// SignalWait is the projection of one signal.awaited.
type SignalWait struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Seq  uint64 `json:"seq"`
	// Signal indexes Snapshot.Signals once a signal is bound to this wait, else -1.
	Signal int `json:"signal"`
}

// Received reports whether a signal has been bound to the wait.
func (w *SignalWait) Received() bool { return w.Signal >= 0 }

// Signal is one received signal.
type Signal struct {
	Name       string          `json:"name"`
	Payload    json.RawMessage `json:"payload"`
	DeliveryID string          `json:"delivery_id"`
	Seq        uint64          `json:"seq"`
	// ConsumedBy is the signal wait the signal is bound to; empty while buffered.
	ConsumedBy string `json:"consumed_by,omitempty"`
}

// Hook is the projection of one hook.
type Hook struct {
	ID          string          `json:"id"`
	Token       string          `json:"token"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	Seq         uint64          `json:"seq"`
	Received    bool            `json:"received"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	DeliveryID  string          `json:"delivery_id,omitempty"`
	ReceivedSeq uint64          `json:"received_seq,omitempty"`
}

// Child is the projection of one child workflow.
type Child struct {
	ID           string             `json:"id"`
	RunID        string             `json:"run_id"`
	Definition   string             `json:"definition"`
	Input        json.RawMessage    `json:"input"`
	CancelPolicy event.CancelPolicy `json:"cancel_policy"`
	// BuildID and Patches are the spec the child run starts with, as recorded.
	BuildID  string        `json:"build_id,omitempty"`
	Patches  []string      `json:"patches,omitempty"`
	BatchSeq uint64        `json:"batch_seq"`
	Settled  bool          `json:"settled"`
	Outcome  event.Outcome `json:"outcome,omitempty"`
	// EndedRunID is the run that ended: RunID or its last continuation.
	EndedRunID string           `json:"ended_run_id,omitempty"`
	Output     json.RawMessage  `json:"output,omitempty"`
	Error      *event.ErrorInfo `json:"error,omitempty"`
	SettledSeq uint64           `json:"settled_seq,omitempty"`
	// Retry is the child's retry policy, normalized; nil for none. Attempt is the attempt
	// running or due next (0 until a retry is scheduled: the first), AttemptRunID its run
	// (ChildAttemptRunID), and RetryDue and RetrySeq the due time and the child.retry_scheduled
	// of an attempt waiting out its backoff.
	Retry        *event.RetryPolicy `json:"retry,omitempty"`
	Attempt      int                `json:"attempt,omitempty"`
	AttemptRunID string             `json:"attempt_run_id,omitempty"`
	RetryDue     time.Time          `json:"retry_due,omitzero"`
	RetrySeq     uint64             `json:"retry_seq,omitempty"`
	// Cancellation is the policy of the workflow's ctx.CancelChild, recorded at CancelSeq;
	// empty if the workflow never cancelled the child (CancelPending while wait_cancelled
	// waits for the child's run to end).
	Cancellation event.Cancellation `json:"cancellation,omitempty"`
	CancelSeq    uint64             `json:"cancel_seq,omitempty"`

	// vetted is set when the recorded ID, definition, cancellation policy and derived run ID
	// are what Validate would record for them (see Step.vetted).
	vetted bool
}

// Blocked describes the latest failed decision of a blocked run.
type Blocked struct {
	Kind    string `json:"kind"`
	Code    string `json:"code"`
	Detail  string `json:"detail"`
	BuildID string `json:"build_id,omitempty"`
	Seq     uint64 `json:"seq"`
	// Mismatch is what differs, for a non-determinism failure (see event.DecisionFailed).
	Mismatch *event.Mismatch `json:"mismatch,omitempty"`
}

// Outcome is the terminal outcome of a run.
type Outcome struct {
	Outcome        event.Outcome    `json:"outcome"`
	Output         json.RawMessage  `json:"output,omitempty"`
	Error          *event.ErrorInfo `json:"error,omitempty"`
	Reason         string           `json:"reason,omitempty"`
	Cause          event.Cause      `json:"cause,omitempty"`
	SuccessorRunID string           `json:"successor_run_id,omitempty"`
	Input          json.RawMessage  `json:"input,omitempty"`
	Seq            uint64           `json:"seq"`
	Time           time.Time        `json:"time"`
}

// Progress counts what a run has done and what it waits on.
type Progress struct {
	Events          uint64 `json:"events"`
	Decisions       int    `json:"decisions"`
	Steps           int    `json:"steps"`
	StepsRunning    int    `json:"steps_running"`
	StepsRetrying   int    `json:"steps_retrying"`
	StepsCompleted  int    `json:"steps_completed"`
	StepsFailed     int    `json:"steps_failed"`
	StepsCancelled  int    `json:"steps_cancelled"`
	WaitsPending    int    `json:"waits_pending"`
	WaitsFired      int    `json:"waits_fired"`
	SignalsReceived int    `json:"signals_received"`
	SignalWaits     int    `json:"signal_waits_pending"`
	HooksPending    int    `json:"hooks_pending"`
	HooksReceived   int    `json:"hooks_received"`
	ChildrenPending int    `json:"children_pending"`
	ChildrenSettled int    `json:"children_settled"`
}

// Snapshot is the projection of a run's history: a fold over its events that summarises status,
// steps, waits, signals, hooks, children, progress and the terminal outcome. It is never a second
// truth: it is rebuilt from history and never written back.
//
// A Snapshot is built by [Project] or by [Snapshot.Apply] one event at a time; applying events
// n+1..m to the snapshot at n gives the same snapshot as projecting 1..m. It is not safe for
// concurrent use; readers that share one must not call Apply meanwhile.
type Snapshot struct {
	RunID         string           `json:"run_id"`
	Seq           uint64           `json:"seq"`
	Status        Status           `json:"status"`
	StartedAt     time.Time        `json:"started_at"`
	UpdatedAt     time.Time        `json:"updated_at"`
	Spec          event.Spec       `json:"spec"`
	Input         json.RawMessage  `json:"input"`
	Queue         string           `json:"queue,omitempty"`
	Seed          string           `json:"-"`
	Parent        *event.ParentRef `json:"parent,omitempty"`
	ContinuedFrom string           `json:"continued_from,omitempty"`
	Generation    int              `json:"generation,omitempty"`
	// TimerSeq is the sequence of the latest event that scheduled one of the run's own timers
	// (OwnTimers: a wait or a retry backoff), 0 for none, or unknown in a snapshot decoded
	// from JSON: with the pending counts it tells a driver when to look for them again.
	TimerSeq uint64 `json:"-"`
	// TraceParent is the run's trace context, as run.started recorded it ("" for none).
	TraceParent string `json:"-"`

	Steps       map[string]*Step       `json:"steps"`
	Waits       map[string]*Wait       `json:"waits"`
	SignalWaits map[string]*SignalWait `json:"signal_waits"`
	Signals     []*Signal              `json:"signals"`
	Hooks       map[string]*Hook       `json:"hooks"`
	Children    map[string]*Child      `json:"children"`

	CancelRequested bool     `json:"cancel_requested"`
	CancelReason    string   `json:"cancel_reason,omitempty"`
	Blocked         *Blocked `json:"blocked,omitempty"`
	Outcome         *Outcome `json:"outcome,omitempty"`
	Progress        Progress `json:"progress"`
	// SideEffects holds the values side_effect.recorded recorded, by side effect ID.
	SideEffects map[string]*SideEffect `json:"side_effects,omitempty"`
	// Attributes are the run's search attributes now: those it started with, each replaced by
	// the latest upsert that set it. Empty for none.
	Attributes event.Attributes `json:"attributes,omitempty"`
	// Upserts are the recorded attributes.upserted decisions by upsert ID.
	Upserts map[string]*Upsert `json:"upserts,omitempty"`
	// Updates holds the run's updates by update ID (see Update); nil before the first.
	Updates map[string]*Update `json:"updates,omitempty"`

	// Delayed is set while the run waits out its start delay (run.started's NotBefore, moved
	// by run.debounced) and clear from run.delay_fired on: no decision is made meanwhile.
	Delayed bool `json:"delayed,omitempty"`
	// NotBefore is the end of the start delay, and NotBeforeSeq the sequence of the event that
	// set it (run.started or the latest run.debounced): the start timer's ID.
	NotBefore    time.Time `json:"not_before,omitzero"`
	NotBeforeSeq uint64    `json:"not_before_seq,omitempty"`
	// StartPolicy is run.started's record of the start policies the run started under.
	StartPolicy *event.StartPolicy `json:"start_policy,omitempty"`
	// Debounced counts the starts collapsed into the run (run.debounced).
	Debounced int `json:"debounced,omitempty"`

	// Priority is the run's priority, as run.started recorded it (higher first).
	Priority int `json:"priority,omitempty"`
	// Control is the flow control the run started under; nil for none.
	Control *event.FlowControl `json:"control,omitempty"`
	// Admitted is set once run.admitted is committed, at AdmittedSeq and AdmittedAt.
	Admitted    bool      `json:"admitted,omitempty"`
	AdmittedSeq uint64    `json:"admitted_seq,omitempty"`
	AdmittedAt  time.Time `json:"admitted_at,omitzero"`
	// Timeouts are run.started's run timeouts and the deadlines they give; nil for none.
	Timeouts *event.RunTimeouts `json:"timeouts,omitempty"`
	// Schedule is run.started's record of the schedule that started the run (its name, the
	// slot, the action); nil for a run no schedule started. Set once, never changed.
	Schedule *event.ScheduleRef `json:"schedule,omitempty"`

	// ResetFrom is run.started's record of the reset that created the run (the old run, the
	// point, the mode); nil for a run that is not a reset. See docs/reset.md.
	ResetFrom *event.ResetFrom `json:"reset_from,omitempty"`
	// Resets are the resets of this run (run.reset), oldest first: each names the new run.
	Resets []ResetLink `json:"resets,omitempty"`
	// DeletedSeq is the sequence of the run's run.deleted, 0 while it is not deleted: a history
	// read whole again (from its archive and the stream) ends with it.
	DeletedSeq uint64 `json:"deleted_seq,omitempty"`
	// Paused is the run's current pause (run.paused, not followed by run.unpaused); nil when
	// it is not paused. Pauses counts the run.paused events recorded.
	Paused *Pause `json:"paused,omitempty"`
	Pauses int    `json:"pauses,omitempty"`

	// ids maps every decision ID to its kind; IDs share one namespace.
	ids map[string]string
	// batches maps a step.scheduled or child.scheduled sequence to its members in order;
	// stepBatches and childBatches map it to the members' projections, in the same order.
	batches      map[uint64][]string
	stepBatches  map[uint64][]*Step
	childBatches map[uint64][]*Child
	// awaiting holds, per signal name, the unbound signal waits in order.
	awaiting map[string][]string
	// buffered holds, per signal name, the indexes of unconsumed signals in order.
	buffered   map[string][]int
	deliveries map[string]struct{}
	tokens     map[string]string
	// unsettled lists the steps that are running or retrying, in scheduling order, linked
	// through Step.prev and Step.next: a step joins at the end when scheduled and leaves when
	// it settles, both in constant time.
	unsettled stepList
	// exhausted lists steps that failed finally under ExhaustionFailRun, in order.
	exhausted []string
	// expectRetry is the step whose non-final step.failed must be followed by its retry.
	expectRetry string
	// inputTraces holds the traceparents recorded by the inputs (signals, hook deliveries,
	// cancellation requests) after the latest decision, in order.
	inputTraces []string
	// decidedSeq is the sequence of the latest decision event or decision.failed.
	decidedSeq uint64
	// summarySeq and summaryAt are the sequence and time of the event that last changed the
	// run's Summary (its status or detail).
	summarySeq uint64
	summaryAt  time.Time
	// ahead is, while Replay asks the code for the decision the history records next, that
	// recorded decision's first event (see ReplayedSideEffect, decideUpdate); nil otherwise.
	ahead event.Payload
	// stepCancels counts the steps with a wait_cancelled cancellation pending (CancelPending).
	stepCancels int
	// updateOrder lists the update IDs in the order received; undecided those not yet
	// accepted or rejected, in the same order.
	updateOrder, undecided []string
	// resetEnding is set by a run.reset that ends the run: its termination follows.
	resetEnding bool
	// pauseDeliveries holds the delivery IDs of the recorded pause and unpause requests.
	pauseDeliveries map[string]struct{}
}

var zeroTime time.Time

// New returns the empty snapshot of run runID, before run.started.
func New(runID string) *Snapshot { return newSized(runID, 0) }

// newSized returns the empty snapshot of a run expected to schedule about steps steps, with
// room for them: a projection of a long history does not grow its maps step by step.
func newSized(runID string, steps int) *Snapshot {
	return &Snapshot{
		RunID:        runID,
		Steps:        make(map[string]*Step, steps),
		Waits:        map[string]*Wait{},
		SignalWaits:  map[string]*SignalWait{},
		Signals:      []*Signal{},
		Hooks:        map[string]*Hook{},
		Children:     map[string]*Child{},
		ids:          make(map[string]string, steps),
		batches:      make(map[uint64][]string, steps),
		stepBatches:  make(map[uint64][]*Step, steps),
		childBatches: map[uint64][]*Child{},
		awaiting:     map[string][]string{},
		buffered:     map[string][]int{},
		deliveries:   map[string]struct{}{},
		tokens:       map[string]string{},
		SideEffects:  map[string]*SideEffect{},

		pauseDeliveries: map[string]struct{}{},
	}
}

// Project folds a complete history, starting at sequence 1, into a snapshot. It returns a
// *HistoryError for the first event that breaks an invariant.
func Project(runID string, history []event.Envelope) (*Snapshot, error) {
	s := newSized(runID, len(history)/2) // a step is scheduled and settled: two events
	if err := s.ApplyAll(history); err != nil {
		return nil, err
	}
	return s, nil
}

// ApplyAll applies events in order, stopping at the first error.
func (s *Snapshot) ApplyAll(events []event.Envelope) error {
	for _, e := range events {
		if err := s.Apply(e); err != nil {
			return err
		}
	}
	return nil
}

// Terminal reports whether the run has ended.
func (s *Snapshot) Terminal() bool { return s.Outcome != nil }

// DecidedSeq returns the sequence of the run's latest decision event (what workflow code or the
// automatic transitions of Decide recorded) or decision.failed; 0 before the first.
func (s *Snapshot) DecidedSeq() uint64 { return s.decidedSeq }

// InputTraces returns the traceparents that the inputs recorded after the latest decision (or
// decision.failed) carry, in order: the ingress requests the next decision answers. The slice is
// the snapshot's; it is replaced, not changed, when a decision is applied.
func (s *Snapshot) InputTraces() []string { return s.inputTraces }

// Batch returns the members, in order, of the step or child batch recorded at seq.
func (s *Snapshot) Batch(seq uint64) []string { return s.batches[seq] }

// KindOf returns the kind ("step", "wait", "signal_wait", "hook", "child", "side_effect") that uses id, or "".
func (s *Snapshot) KindOf(id string) string { return s.ids[id] }

// DeliverySeen reports whether a signal with this delivery ID has been received, or a
// cancellation request or a termination recorded under it.
func (s *Snapshot) DeliverySeen(id string) bool {
	_, ok := s.deliveries[id]
	return ok
}

// BufferedSignals returns the number of received signals called name that no wait consumed yet.
func (s *Snapshot) BufferedSignals(name string) int { return len(s.buffered[name]) }

// Unsettled returns the IDs of steps that have not settled, in scheduling order. Its cost grows
// with the number of unsettled steps only.
func (s *Snapshot) Unsettled() []string {
	ids := make([]string, 0, max(0, s.Progress.StepsRunning+s.Progress.StepsRetrying))
	for st := s.unsettled.first; st != nil; st = st.next {
		ids = append(ids, st.ID)
	}
	return ids
}

// InFlight returns the IDs of steps with an attempt in flight (status running), in scheduling
// order: the attempts a worker must run. Its cost grows with the number of unsettled steps only.
func (s *Snapshot) InFlight() []string {
	ids := make([]string, 0, max(0, s.Progress.StepsRunning))
	for st := s.unsettled.first; st != nil; st = st.next {
		if st.Status == StepRunning {
			ids = append(ids, st.ID)
		}
	}
	return ids
}

// stepList is a doubly linked list of steps, through Step.prev and Step.next.
type stepList struct{ first, last *Step }

// push appends st, which is in no list.
func (l *stepList) push(st *Step) {
	st.prev = l.last
	if l.last != nil {
		l.last.next = st
	} else {
		l.first = st
	}
	l.last = st
}

// remove unlinks st, which is in l.
func (l *stepList) remove(st *Step) {
	if st.prev != nil {
		st.prev.next = st.next
	} else {
		l.first = st.next
	}
	if st.next != nil {
		st.next.prev = st.prev
	} else {
		l.last = st.prev
	}
	st.prev, st.next = nil, nil
}

func (s *Snapshot) status() Status {
	p := &s.Progress
	switch {
	case s.Outcome != nil:
		switch s.Outcome.Outcome {
		case event.OutcomeCompleted:
			return StatusCompleted
		case event.OutcomeFailed:
			return StatusFailed
		case event.OutcomeCancelled:
			return StatusCancelled
		default:
			return StatusContinuedAsNew
		}
	case s.Paused != nil:
		return StatusPaused
	case s.Blocked != nil:
		return StatusBlocked
	case s.CancelRequested:
		return StatusCancelling
	case s.Delayed:
		return StatusSuspended
	case s.Queued():
		return StatusQueued
	case p.Decisions == 0:
		return StatusPending
	case p.StepsRunning > 0:
		return StatusRunning
	case p.StepsRetrying+p.WaitsPending+p.SignalWaits+p.HooksPending+p.ChildrenPending > 0:
		return StatusSuspended
	default:
		return StatusRunning
	}
}

// Summary is the part of a snapshot that run listings show: the runs index entry of a run. It
// changes only when the run's status or detail changes, not on every event, so an index of
// summaries is written a few times per run.
type Summary struct {
	RunID      string `json:"run_id"`
	Definition string `json:"definition"`
	BuildID    string `json:"build_id,omitempty"`
	Queue      string `json:"queue,omitempty"`
	Status     Status `json:"status"`
	// Seq is the sequence of the event that last changed the summary: the run has been in
	// Status since Seq. An index entry never moves to a lower Seq.
	Seq       uint64    `json:"seq"`
	StartedAt time.Time `json:"started_at"`
	// UpdatedAt is the recorded time of the event at Seq.
	UpdatedAt time.Time `json:"updated_at"`
	// Parent is the parent run of a child run.
	Parent string `json:"parent,omitempty"`
	// Detail is the failure, cancellation reason or blocking diagnosis, when there is one.
	Detail string `json:"detail,omitempty"`
	// Parked says why no worker drives the run now: it waits for a worker of its build or
	// definition. The runs index sets it; Snapshot.Summary leaves it empty.
	Parked string `json:"parked,omitempty"`
	// Damaged says what was found damaged in the run's history; the runs index sets it.
	Damaged string `json:"damaged,omitempty"`
	// Attributes are the run's search attributes as of Seq (Snapshot.Attributes).
	Attributes event.Attributes `json:"attributes,omitempty"`
	// Deleted makes the entry a tombstone: the run ended, its retention period passed, and its
	// history was deleted (or is being deleted), after being archived if Archive says where.
	// The other fields keep the run's last summary. Nil for a run whose history is kept; the
	// retention sweeper sets it (docs/retention.md).
	Deleted *Deletion `json:"deleted,omitempty"`
	// ResetFrom is the run this one is a reset of; ResetTo the run of this one's latest reset.
	ResetFrom string `json:"reset_from,omitempty"`
	ResetTo   string `json:"reset_to,omitempty"`
	// ContinuedAs is the successor of a run that continued as new. With ResetTo, it is the link
	// a tombstone keeps to the run its chain went on in once its history is deleted (schedules
	// follow it, docs/schedules.md).
	ContinuedAs string `json:"continued_as,omitempty"`
}

// Deletion is the tombstone of a run whose history was deleted after its retention period.
type Deletion struct {
	// At is when the sweeper decided to delete the run.
	At time.Time `json:"at"`
	// Reason says why: the retention period and the run's end.
	Reason string `json:"reason"`
	// Archive says where the whole history was archived before it was deleted ("objectstore:
	// FLOW_ARCHIVE/<run>", "dir:<file>"); empty when it was not.
	Archive string `json:"archive,omitempty"`
	// Purged is set once the history and the run's derived state are gone; until then the
	// sweeper finishes the deletion on its next pass.
	Purged bool `json:"purged,omitempty"`
	// Msgs is how many FLOW_HISTORY messages (commits) the run had when it was tombstoned:
	// the history service's start check counts them as deleted, not lost.
	Msgs uint64 `json:"msgs,omitempty"`
}

// ResetLink is one run.reset of a run: the new run, the point and the mode, at Seq.
type ResetLink struct {
	NewRunID   string          `json:"new_run_id"`
	Point      uint64          `json:"point"`
	Mode       event.ResetMode `json:"mode"`
	StepID     string          `json:"step_id,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	DropInputs bool            `json:"drop_inputs,omitempty"`
	Terminated bool            `json:"terminated,omitempty"`
	// InputReplaced is set for a rerun with a new input.
	InputReplaced bool   `json:"input_replaced,omitempty"`
	Seq           uint64 `json:"seq"`
}

// Summary returns the run's summary, as of the event that last changed it.
func (s *Snapshot) Summary() Summary {
	sum := Summary{RunID: s.RunID, Definition: s.Spec.Definition, BuildID: s.Spec.BuildID, Queue: s.Queue,
		Status: s.Status, Seq: s.summarySeq, StartedAt: s.StartedAt, UpdatedAt: s.summaryAt, Attributes: s.Attributes}
	if s.Parent != nil {
		sum.Parent = s.Parent.RunID
	}
	if s.ResetFrom != nil {
		sum.ResetFrom = s.ResetFrom.RunID
	}
	if n := len(s.Resets); n > 0 {
		sum.ResetTo = s.Resets[n-1].NewRunID
	}
	if s.Outcome != nil && s.Outcome.Outcome == event.OutcomeContinuedAsNew {
		sum.ContinuedAs = s.Outcome.SuccessorRunID
	}
	switch {
	case s.Outcome != nil && s.Outcome.Error != nil:
		sum.Detail = s.Outcome.Error.Error()
	case s.Outcome != nil:
		sum.Detail = s.Outcome.Reason
	case s.Paused != nil:
		sum.Detail = s.Paused.Describe(s.RunID)
	case s.Blocked != nil:
		sum.Detail = s.Blocked.Detail
	case s.Queued():
		sum.Detail = s.QueuedReason()
	}
	return sum
}
