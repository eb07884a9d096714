package schedule

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// Overlap says what a schedule does with an action (a slot, a trigger, a backfilled slot) that
// comes while a run it started is still active. The names and meanings are Temporal's.
type Overlap string

const (
	// Skip drops the action (recorded as skipped). The default.
	Skip Overlap = "skip"
	// BufferOne starts the action once the active run ends; while one is buffered, further
	// actions are skipped.
	BufferOne Overlap = "buffer_one"
	// BufferAll buffers every action, and starts them one after the other, each once the run
	// before it ended.
	BufferAll Overlap = "buffer_all"
	// CancelOther requests the cancellation of the active runs and starts the action once they
	// ended; an action that comes while one waits so replaces it (the older is skipped).
	CancelOther Overlap = "cancel_other"
	// TerminateOther terminates the active runs and starts the action at once.
	TerminateOther Overlap = "terminate_other"
	// AllowAll starts every action at once, whatever runs.
	AllowAll Overlap = "allow_all"
)

// Overlaps lists the overlap policies.
var Overlaps = []Overlap{Skip, BufferOne, BufferAll, CancelOther, TerminateOther, AllowAll}

// Valid reports whether o is a policy ("" is Skip).
func (o Overlap) Valid() bool { return o == "" || slices.Contains(Overlaps, o) }

// Or returns o, or def when o is "".
func (o Overlap) Or(def Overlap) Overlap {
	if o == "" {
		return def
	}
	return o
}

// CheckOverlap returns an error naming the policies when o is not one.
func CheckOverlap(o Overlap) error {
	if o.Valid() {
		return nil
	}
	names := make([]string, len(Overlaps))
	for i, p := range Overlaps {
		names[i] = string(p)
	}
	return fmt.Errorf("%w: overlap policy %q is not one of %s", ErrInvalid, o, strings.Join(names, ", "))
}

// Kind says what made an action: its slot came (scheduled), a client asked for one now
// (trigger), or a backfill of a past range. It is recorded in run.started.schedule.action.
type Kind = event.ScheduleAction

// Outcome is what became of an action.
type Outcome string

const (
	// Started: its run was started (or found started: a repeat after a crash).
	Started Outcome = "started"
	// Buffered: waiting for the active run to end (overlap policy).
	Buffered Outcome = "buffered"
	// Skipped: dropped by the overlap policy.
	Skipped Outcome = "skipped"
	// Missed: the slot was due longer ago than the catch-up window when the scheduler came to
	// it (downtime); Count says how many consecutive slots one record stands for.
	Missed Outcome = "missed"
	// Paused: the slot came while the schedule was paused.
	Paused Outcome = "paused"
	// Failed: the start was refused (Detail says why); the schedule goes on.
	Failed Outcome = "failed"
)

// DefaultCatchupWindow is how late a slot may be started after downtime when a schedule does
// not say otherwise.
const DefaultCatchupWindow = time.Hour

// RecentMax bounds the actions a schedule remembers.
const RecentMax = 20

// Schedule is one schedule entity: what it starts, when, and its state. It is stored as JSON in
// the FLOW_SCHEDULES bucket under its name.
type Schedule struct {
	Name string `json:"name"`
	Spec Spec   `json:"spec"`
	// Definition, Queue and Input are the runs' start.
	Definition string          `json:"definition"`
	Queue      string          `json:"queue,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	// Overlap is the overlap policy ("" is Skip).
	Overlap Overlap `json:"overlap,omitempty"`
	// CatchupWindow bounds how late after its fire time a slot is still started (after
	// downtime); 0 is DefaultCatchupWindow.
	CatchupWindow event.Duration `json:"catchup_window,omitempty"`
	CreatedAt     time.Time      `json:"created_at"`
	State         State          `json:"state"`
}

// State is what a schedule did and has yet to do.
type State struct {
	Paused bool   `json:"paused,omitempty"`
	Note   string `json:"note,omitempty"`
	// Cursor is the latest slot the schedule dealt with (started, buffered, skipped): the
	// next slot is the first after it. Set to the creation time at first.
	Cursor time.Time `json:"cursor"`
	// Running lists the runs the schedule started that were active when last looked at;
	// Cancelling those of them it asked to cancel (CancelOther).
	Running    []string `json:"running,omitempty"`
	Cancelling []string `json:"cancelling,omitempty"`
	// Current maps each run of Running whose chain went on (it continued as new, or was reset)
	// to the chain's latest run known: the run a round reads the chain from, and cancels or
	// terminates in its place. Retention deleting the runs behind it changes nothing.
	Current map[string]string `json:"current,omitempty"`
	// Buffered holds the actions waiting for the active runs to end, oldest first.
	Buffered []Pending `json:"buffered,omitempty"`
	// Requests holds the triggers and backfills not dealt with yet, oldest first.
	Requests []Request `json:"requests,omitempty"`
	// Recent holds the latest actions, oldest first, at most RecentMax.
	Recent []Action `json:"recent,omitempty"`
	// Counts of actions by outcome, over the schedule's life.
	Started int64 `json:"started,omitempty"`
	Skipped int64 `json:"skipped,omitempty"`
	Missed  int64 `json:"missed,omitempty"`
	Failed  int64 `json:"failed,omitempty"`
	// Seen holds the IDs of the latest triggers and backfills taken, to take a retried one once.
	Seen []string `json:"seen,omitempty"`
	// UpdatedAt is when the state last changed.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// CurrentRun returns the latest run known of the chain that run id of Running began: id itself
// unless its chain went on.
func (st *State) CurrentRun(id string) string {
	if c, ok := st.Current[id]; ok {
		return c
	}
	return id
}

// Pending is an action waiting its turn: Overlap overrides the schedule's (a backfill's own).
type Pending struct {
	Slot    time.Time `json:"slot"`
	Kind    Kind      `json:"kind"`
	RunID   string    `json:"run_id"`
	Overlap Overlap   `json:"overlap,omitempty"`
}

// Request is a trigger (At: when it was asked for, its slot) or a backfill (the slots in
// [Start, End), Done the latest of them dealt with) asked for by a client.
type Request struct {
	ID      string    `json:"id"`
	Kind    Kind      `json:"kind"`
	At      time.Time `json:"at,omitzero"`
	Start   time.Time `json:"start,omitzero"`
	End     time.Time `json:"end,omitzero"`
	Done    time.Time `json:"done,omitzero"`
	Overlap Overlap   `json:"overlap,omitempty"`
}

// Action is a record of what the schedule did with one action.
type Action struct {
	Slot    time.Time `json:"slot"`
	Kind    Kind      `json:"kind"`
	RunID   string    `json:"run_id,omitempty"`
	Outcome Outcome   `json:"outcome,omitempty"`
	// At is when it was decided (for a next action: when it fires); Count the number of consecutive slots a Missed or Paused
	// record stands for (up to Until), when more than one.
	At     time.Time `json:"at"`
	Count  int       `json:"count,omitempty"`
	Until  time.Time `json:"until,omitzero"`
	Detail string    `json:"detail,omitempty"`
}

// MaxNameLength bounds schedule names: run IDs are derived from them.
const MaxNameLength = 64

// ValidateName checks a schedule name: 1 to 64 letters, digits, '-' or '_', starting with a
// letter (it becomes a KV key and a part of run IDs).
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLength {
		return fmt.Errorf("%w: schedule name %q must be 1 to %d characters long", ErrInvalid, name, MaxNameLength)
	}
	for i, c := range name {
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if i == 0 && !letter {
			return fmt.Errorf("%w: schedule name %q must start with a letter, such as daily-report", ErrInvalid, name)
		}
		if !letter && !('0' <= c && c <= '9') && c != '-' && c != '_' {
			return fmt.Errorf("%w: schedule name %q may hold only letters, digits, '-' and '_' (it becomes part of run IDs), such as daily-report", ErrInvalid, name)
		}
	}
	return nil
}

// Validate checks s's fields (not that its definition exists) and returns its Timing.
func (s *Schedule) Validate() (*Timing, error) {
	if err := ValidateName(s.Name); err != nil {
		return nil, err
	}
	if err := event.ValidateName("definition", s.Definition); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if s.Queue != "" {
		if err := event.ValidateName("queue", s.Queue); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	if len(s.Input) > 0 && !json.Valid(s.Input) {
		return nil, fmt.Errorf("%w: the input is not valid JSON; give a JSON value such as '{\"region\":\"eu\"}'", ErrInvalid)
	}
	if err := CheckOverlap(s.Overlap); err != nil {
		return nil, err
	}
	if s.CatchupWindow < 0 {
		return nil, fmt.Errorf("%w: catch-up window %s is negative; give a duration such as 10m", ErrInvalid, time.Duration(s.CatchupWindow))
	}
	return s.Spec.Compile()
}

// catchup returns s's catch-up window.
func (s *Schedule) catchup() time.Duration {
	if s.CatchupWindow == 0 {
		return DefaultCatchupWindow
	}
	return time.Duration(s.CatchupWindow)
}

// slotFormat is how slots appear in run IDs: UTC, to the second (basic ISO 8601, no dots or
// colons, which run IDs may not hold).
const slotFormat = "20060102T150405Z"

// RunID returns the ID of the run of schedule name's action of kind at slot: derived, so that
// starting it again after a crash (at expected sequence 0) finds the run already started.
// reqID, the request's ID, tells backfills apart (a backfill of a range that ran already starts
// new runs) and triggers apart: a trigger's slot is the time it was asked for, to the
// millisecond, and its run ID ends with 8 hex digits of a hash of its request ID, so that two
// triggers in one millisecond are two runs.
func RunID(name string, kind Kind, slot time.Time, reqID string) string {
	slot = slot.UTC()
	switch kind {
	case event.ScheduleTrigger:
		h := fnv.New32a()
		_, _ = h.Write([]byte(reqID))
		return fmt.Sprintf("%s-t%s%03dZ-%08x", name, slot.Format("20060102T150405"), slot.Nanosecond()/int(time.Millisecond), h.Sum32())
	case event.ScheduleBackfill:
		return fmt.Sprintf("%s-b%s-%s", name, reqID, slot.Format(slotFormat))
	}
	return name + "-" + slot.Format(slotFormat)
}
