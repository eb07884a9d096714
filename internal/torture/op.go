package torture

import (
	"fmt"
	"strings"

	"github.com/flowrun/flow/internal/fault"
)

// Op is one operation of a sequence: data the executor applies to a stack. String prints it as
// a Go-ish line, so that a failing sequence reads as a script.
type Op interface {
	// Kind names the operation's kind, the unit the generator's switches leave out.
	Kind() Kind
	String() string
}

// Kind is an operation's kind.
type Kind string

// The kinds of operations.
const (
	KindStart           Kind = "start"
	KindSignal          Kind = "signal"
	KindUpdate          Kind = "update"
	KindUpdateWithStart Kind = "update-with-start"
	KindSignalWithStart Kind = "signal-with-start"
	KindQuery           Kind = "query"
	KindCancel          Kind = "cancel"
	KindTerminate       Kind = "terminate"
	KindPauseRun        Kind = "pause-run"
	KindPauseDef        Kind = "pause-definition"
	KindReset           Kind = "reset"
	KindBatch           Kind = "batch"
	KindSchedule        Kind = "schedule"
	KindTrigger         Kind = "trigger"
	KindBackfill        Kind = "backfill"
	KindSchedulePause   Kind = "schedule-pause"
	KindScheduleDelete  Kind = "schedule-delete"
	KindFault           Kind = "fault"
	KindKill            Kind = "kill"
	KindWait            Kind = "wait"
)

// Kinds lists every kind, in the order the generator's weights list them.
var Kinds = []Kind{KindStart, KindSignal, KindUpdate, KindUpdateWithStart, KindSignalWithStart, KindQuery,
	KindCancel, KindTerminate, KindPauseRun, KindPauseDef, KindReset, KindBatch, KindSchedule, KindTrigger,
	KindBackfill, KindSchedulePause, KindScheduleDelete, KindFault, KindKill, KindWait}

// Start starts run Run of definition Def with the start policies set.
type Start struct {
	Run, Def string
	In       In
	// OnConflict and Reuse are start policies ("" for the defaults).
	OnConflict, Reuse string
	// DelayMs delays the run; Dedup names a dedup key (window 1 minute); Debounce a debounce key
	// (period 300ms).
	DelayMs  int
	Dedup    string
	Debounce string
	Priority int
}

func (o Start) Kind() Kind { return KindStart }
func (o Start) String() string {
	var opts []string
	if o.OnConflict != "" {
		opts = append(opts, fmt.Sprintf("OnConflict: %q", o.OnConflict))
	}
	if o.Reuse != "" {
		opts = append(opts, fmt.Sprintf("Reuse: %q", o.Reuse))
	}
	if o.DelayMs > 0 {
		opts = append(opts, fmt.Sprintf("Delay: %dms", o.DelayMs))
	}
	if o.Dedup != "" {
		opts = append(opts, fmt.Sprintf("DedupKey: %q", o.Dedup))
	}
	if o.Debounce != "" {
		opts = append(opts, fmt.Sprintf("Debounce: %q", o.Debounce))
	}
	if o.Priority != 0 {
		opts = append(opts, fmt.Sprintf("Priority: %d", o.Priority))
	}
	return fmt.Sprintf("Start(%q, %q, %s, {%s})", o.Run, o.Def, o.In, strings.Join(opts, ", "))
}

func (in In) String() string {
	var f []string
	add := func(cond bool, s string, args ...any) {
		if cond {
			f = append(f, fmt.Sprintf(s, args...))
		}
	}
	add(in.Key != "", "Key: %q", in.Key)
	add(in.Steps > 0, "Steps: %d", in.Steps)
	add(in.Flaky, "Flaky: true")
	add(in.NapMs > 0, "NapMs: %d", in.NapMs)
	add(in.Go, "Go: true")
	add(in.Child, "Child: true")
	add(in.CAN > 0, "CAN: %d", in.CAN)
	add(in.Gen > 0, "Gen: %d", in.Gen)
	return "In{" + strings.Join(f, ", ") + "}"
}

// Signal sends signal Name to run Run with delivery ID Delivery.
type Signal struct{ Run, Name, Delivery string }

func (o Signal) Kind() Kind { return KindSignal }
func (o Signal) String() string {
	return fmt.Sprintf("Signal(%q, %q, delivery %q)", o.Run, o.Name, o.Delivery)
}

// Update sends update Name (UpdateAdd or UpdateSlow) with Amount to run Run under update ID ID
// and waits for its outcome in the background.
type Update struct {
	Run, Name string
	Amount    int
	ID        string
}

func (o Update) Kind() Kind { return KindUpdate }
func (o Update) String() string {
	return fmt.Sprintf("Update(%q, %q, %d, id %q)", o.Run, o.Name, o.Amount, o.ID)
}

// UpdateWithStart starts run Run of Def if it does not exist, atomically with update "add".
type UpdateWithStart struct {
	Run, Def string
	In       In
	Amount   int
	ID       string
}

func (o UpdateWithStart) Kind() Kind { return KindUpdateWithStart }
func (o UpdateWithStart) String() string {
	return fmt.Sprintf("UpdateWithStart(%q, %q, %s, add %d, id %q)", o.Run, o.Def, o.In, o.Amount, o.ID)
}

// SignalWithStart starts run Run of Def if it does not exist, atomically with signal "go".
type SignalWithStart struct {
	Run, Def string
	In       In
	Delivery string
}

func (o SignalWithStart) Kind() Kind { return KindSignalWithStart }
func (o SignalWithStart) String() string {
	return fmt.Sprintf("SignalWithStart(%q, %q, %s, go, delivery %q)", o.Run, o.Def, o.In, o.Delivery)
}

// Query asks run Run's query QuerySum.
type Query struct{ Run string }

func (o Query) Kind() Kind     { return KindQuery }
func (o Query) String() string { return fmt.Sprintf("Query(%q, %q)", o.Run, QuerySum) }

// Cancel requests the cancellation of run Run.
type Cancel struct{ Run string }

func (o Cancel) Kind() Kind     { return KindCancel }
func (o Cancel) String() string { return fmt.Sprintf("Cancel(%q)", o.Run) }

// Terminate terminates run Run.
type Terminate struct{ Run string }

func (o Terminate) Kind() Kind     { return KindTerminate }
func (o Terminate) String() string { return fmt.Sprintf("Terminate(%q)", o.Run) }

// PauseRun pauses (or unpauses) run Run.
type PauseRun struct {
	Run     string
	Unpause bool
}

func (o PauseRun) Kind() Kind     { return KindPauseRun }
func (o PauseRun) String() string { return pauseString(o.Unpause, "Run", o.Run) }

// PauseDef pauses (or unpauses) definition Def.
type PauseDef struct {
	Def     string
	Unpause bool
}

func (o PauseDef) Kind() Kind     { return KindPauseDef }
func (o PauseDef) String() string { return pauseString(o.Unpause, "Definition", o.Def) }

// The reset modes the generator uses.
const (
	ResetFirst        = "first"         // to seq 1
	ResetLastDecision = "last_decision" // to the last decision
	ResetStep         = "step"          // to step s0
	ResetRerun        = "rerun"         // rerun from step s0
)

// Reset resets run Run (ResetFirst, ResetLastDecision, ResetStep, ResetRerun).
type Reset struct {
	Run, Mode string
	Drop      bool
	Request   string
}

func (o Reset) Kind() Kind { return KindReset }
func (o Reset) String() string {
	return fmt.Sprintf("Reset(%q, %s, drop %v, request %q)", o.Run, o.Mode, o.Drop, o.Request)
}

// Batch runs a batch job applying Op (cancel, terminate, signal, reset, pause, unpause) to the
// runs of definition Def (every definition when empty) whose ID is at least From.
type Batch struct {
	ID, Op, Def, From string
}

func (o Batch) Kind() Kind { return KindBatch }
func (o Batch) String() string {
	return fmt.Sprintf("Batch(%q, %s, definition %q, run_id >= %q)", o.ID, o.Op, o.Def, o.From)
}

// Schedule creates schedule Name starting runs of Def every EveryMs with overlap policy
// Overlap.
type Schedule struct {
	Name, Def string
	In        In
	EveryMs   int
	Overlap   string
}

func (o Schedule) Kind() Kind { return KindSchedule }
func (o Schedule) String() string {
	return fmt.Sprintf("CreateSchedule(%q, %q, %s, every %dms, overlap %s)", o.Name, o.Def, o.In, o.EveryMs, o.Overlap)
}

// Trigger triggers schedule Name under Overlap ("" for the schedule's); Twice sends a second
// trigger (another request ID) at the same moment.
type Trigger struct {
	Name, Overlap, Request string
	Twice                  bool
}

func (o Trigger) Kind() Kind { return KindTrigger }
func (o Trigger) String() string {
	return fmt.Sprintf("Trigger(%q, overlap %q, request %q, twice %v)", o.Name, o.Overlap, o.Request, o.Twice)
}

// Backfill backfills schedule Name over the last SpanMs.
type Backfill struct {
	Name, Overlap, Request string
	SpanMs                 int
}

func (o Backfill) Kind() Kind { return KindBackfill }
func (o Backfill) String() string {
	return fmt.Sprintf("Backfill(%q, last %dms, overlap %q, request %q)", o.Name, o.SpanMs, o.Overlap, o.Request)
}

// SchedulePause pauses (or unpauses) schedule Name.
type SchedulePause struct {
	Name    string
	Unpause bool
}

func (o SchedulePause) Kind() Kind     { return KindSchedulePause }
func (o SchedulePause) String() string { return pauseString(o.Unpause, "Schedule", o.Name) }

// pauseString prints a pause of what (Run, Definition, Schedule) name, or its unpause:
// PauseRun("r1"), UnpauseSchedule("s1").
func pauseString(unpause bool, what, name string) string {
	verb := "Pause"
	if unpause {
		verb = "Unpause"
	}
	return fmt.Sprintf("%s%s(%q)", verb, what, name)
}

// ScheduleDelete deletes schedule Name.
type ScheduleDelete struct{ Name string }

func (o ScheduleDelete) Kind() Kind     { return KindScheduleDelete }
func (o ScheduleDelete) String() string { return fmt.Sprintf("DeleteSchedule(%q)", o.Name) }

// Fault arms fault point Point in every service: it fails (in-process) or kills the process
// (process stacks) on every Every-th hit, Times times.
type Fault struct {
	Point        fault.Point
	Every, Times int
}

func (o Fault) Kind() Kind { return KindFault }
func (o Fault) String() string {
	return fmt.Sprintf("ArmFault(%q, every %d, %d times)", o.Point, o.Every, o.Times)
}

// The roles of a stack's services.
const (
	RoleHistory   = "history"
	RoleIngress   = "ingress"
	RoleScheduler = "scheduler"
	RoleWorker    = "worker"
)

// Roles lists the roles Kill picks from.
var Roles = []string{RoleHistory, RoleIngress, RoleScheduler, RoleWorker}

// Kill kills the service of Role and starts it again: SIGKILL of its process on a process stack;
// on an in-process stack, its NATS connection is closed under it and it is stopped.
type Kill struct{ Role string }

func (o Kill) Kind() Kind     { return KindKill }
func (o Kill) String() string { return fmt.Sprintf("Kill(%s)", o.Role) }

// Wait lets Ms milliseconds pass (timers, retention and schedules act meanwhile).
type Wait struct{ Ms int }

func (o Wait) Kind() Kind     { return KindWait }
func (o Wait) String() string { return fmt.Sprintf("Wait(%dms)", o.Ms) }

// Format prints a sequence, one numbered op a line.
func Format(ops []Op) string {
	var b strings.Builder
	for i, op := range ops {
		fmt.Fprintf(&b, "  %2d  %s\n", i, op)
	}
	return b.String()
}
