// Package fault injects failures at named points between Flow's durable writes, for the tests
// that show a crash or an error there loses nothing (etcd's failpoints, in miniature).
//
// Code that sits between two writes calls [Injector.Hit] with the point's name; a nil Injector,
// the production default, does nothing and costs a nil check. A test arms points on its own
// Injector (or, in a child process, through the FLOW_FAULTS environment variable, see
// [FromEnv]) to return an error or to kill the process there.
package fault

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Point names a place between two durable writes.
type Point string

// The points. Each comment names the write before and the write after.
const (
	// StoreAppend: before a commit is appended to a run's history (the append fails).
	StoreAppend Point = "store-append"
	// AfterAppendBeforeTask: an input (start, signal, hook delivery, cancel, timer fire, child
	// settlement) is committed; the writer's own resume task is not published yet.
	AfterAppendBeforeTask Point = "after-append-before-task"
	// TaskPublish: before a resume task is published (the publish fails).
	TaskPublish Point = "task-publish"
	// TaskOffer: the ingress does not offer a new run to the workers (eager start,
	// jshost.Host.ResumeOffered): it publishes the run's task, which alone reaches a worker.
	TaskOffer Point = "task-offer"
	// OfferTakenBeforeTask: a worker took a new run's offer and answered the ingress; it
	// neither sends the run's task nor drives the run, as if it died there (services/worker).
	OfferTakenBeforeTask Point = "offer-taken-before-task"
	// AfterDecisionBeforeChildren: child.scheduled is committed; the child runs are not started.
	AfterDecisionBeforeChildren Point = "after-decision-before-children"
	// AfterTerminalBeforeEnd: a run's terminal event is committed; the parent's notice, the
	// successor's start and the children's cancellation are not done yet.
	AfterTerminalBeforeEnd Point = "after-terminal-before-end"
	// TimerPut: before a timer entry is written (the write fails).
	TimerPut Point = "timer-put"
	// IndexPut: before a runs index entry is written (the write fails).
	IndexPut Point = "index-put"
	// HistoryBeforeEffects: the history service read a commit; none of its consequences are
	// applied yet.
	HistoryBeforeEffects Point = "history-before-effects"
	// HistoryBeforeIndex: a commit's timers, tasks, children and end-of-run work are done; its
	// runs index entry is not written yet.
	HistoryBeforeIndex Point = "history-before-index"
	// HistoryBeforeAck: every consequence of a commit is applied; the history service has not
	// acknowledged it.
	HistoryBeforeAck Point = "history-before-ack"
	// IngressBeforeReply: the ingress committed an input; its answer to the requester is not
	// sent (an armed Fail drops it, as the death of the process there would).
	IngressBeforeReply Point = "ingress-before-reply"
	// AdmitAfterReserve: the admission controller took runs' slots and rate tokens in
	// FLOW_LIMITS; their run.admitted events are not appended yet.
	AdmitAfterReserve Point = "admit-after-reserve"
)

// Points of start policies (docs/start-policies.md), armed by the engine's start-policy tests
// (the crash workload of Points uses no start policy).
const (
	// AfterKeyBeforeStart: a dedup or debounce key is claimed for a run (the FLOW_START_KEYS
	// entry); the run's run.started is not appended yet.
	AfterKeyBeforeStart Point = "after-key-before-start"
	// AfterStartBeforeReplace: a run that replaces an active run of its ID (terminate_existing)
	// is started; the replaced run is not terminated yet.
	AfterStartBeforeReplace Point = "after-start-before-replace"
)

// Points of the retention sweeper (docs/retention.md), armed by services/history's retention
// tests (the crash workload of Points deletes no run).
const (
	// RetentionAfterArchive: an ended run's whole history is archived; its deletion is not
	// recorded yet (run.deleted).
	RetentionAfterArchive Point = "retention-after-archive"
	// RetentionAfterTombstone: the run's deletion is recorded (run.deleted, naming its archive)
	// and its tombstone is in the runs index; its derived state and history are not purged yet.
	RetentionAfterTombstone Point = "retention-after-tombstone"
	// RetentionAfterPurge: the run's derived state and its FLOW_HISTORY subject are purged; its
	// tombstone does not say so yet.
	RetentionAfterPurge Point = "retention-after-purge"
)

// RetentionPoints lists the points of the retention sweeper, in the order a deletion passes
// them.
var RetentionPoints = []Point{RetentionAfterArchive, RetentionAfterTombstone, RetentionAfterPurge}

// Points of batch jobs (docs/batch.md), armed by the batch executor's tests.
const (
	// BatchAfterTargets: a batch job's target chunks are written; the job is not marked running
	// (with its total) yet.
	BatchAfterTargets Point = "batch-after-targets"
	// BatchAfterOp: one target's operation is applied; the rest of its window is not, and the
	// job's cursor is not advanced.
	BatchAfterOp Point = "batch-after-op"
	// BatchBeforeCursor: a window's operations are all applied; the job's cursor and counts
	// are not advanced yet.
	BatchBeforeCursor Point = "batch-before-cursor"
	// BatchBeforeEnd: every target is done and counted; the job is not marked completed yet.
	BatchBeforeEnd Point = "batch-before-end"
)

// BatchPoints lists the points of batch jobs.
var BatchPoints = []Point{BatchAfterTargets, BatchAfterOp, BatchBeforeCursor, BatchBeforeEnd}

// StartPolicyPoints lists the points of start policies.
var StartPolicyPoints = []Point{AfterKeyBeforeStart, AfterStartBeforeReplace}

// Points of timeouts and heartbeats (docs/timeouts.md).
const (
	// HeartbeatPut: a worker is about to write a step attempt's FLOW_HEARTBEATS entry (its
	// start or a heartbeat); failing it leaves the entry as it was.
	HeartbeatPut Point = "heartbeat-put"
)

// TimeoutPoints lists the points of timeouts and heartbeats.
var TimeoutPoints = []Point{HeartbeatPut}

// Points of a workflow's cancellation of one child (docs/cancellation.md), armed by the worker's
// cancellation tests (the crash workload of Points cancels no child).
const (
	// AfterDecisionBeforeChildCancel: a child.settled (try_cancel) or child.cancel_requested is
	// committed; the child's run.cancel_requested is not appended yet.
	AfterDecisionBeforeChildCancel Point = "after-decision-before-child-cancel"
)

// CancelPoints lists the points of child cancellation.
var CancelPoints = []Point{AfterDecisionBeforeChildCancel}

// Points of reset and rerun (docs/reset.md), armed by the engine's reset tests.
const (
	// AfterResetRecordBeforeStart: the old run records run.reset (and its termination); the new
	// run it names is not written yet, nor its hook tokens routed to it.
	AfterResetRecordBeforeStart Point = "after-reset-record-before-start"
)

// ResetPoints lists the points of reset.
var ResetPoints = []Point{AfterResetRecordBeforeStart}

// Points lists every point of the crash workload, for suites that run each scenario at each point.
var Points = []Point{StoreAppend, AfterAppendBeforeTask, TaskPublish, AfterDecisionBeforeChildren,
	AfterTerminalBeforeEnd, TimerPut, IndexPut, HistoryBeforeEffects, HistoryBeforeIndex,
	HistoryBeforeAck, AdmitAfterReserve}

// Points of definition and queue pauses (docs/pause.md), armed by services/ingress's pause
// tests.
const (
	// PauseParkBeforeAck: a worker parked a run that a definition or queue pause holds (its
	// FLOW_PARKED entry); it has not acknowledged the run's task.
	PauseParkBeforeAck Point = "pause-park-before-ack"
	// PauseDispatchBeforeDelete: the history service sent the task of a run parked for a pause
	// that is gone; the run's FLOW_PARKED entry is not deleted yet.
	PauseDispatchBeforeDelete Point = "pause-dispatch-before-delete"
)

// PausePoints lists the points of definition and queue pauses.
var PausePoints = []Point{PauseParkBeforeAck, PauseDispatchBeforeDelete}

// IngressPoints are the points only the ingress service passes, which the workload of Points
// (inputs written through an engine) never reaches; services/ingress tests them.
var IngressPoints = []Point{IngressBeforeReply}

// Action is what an armed point does.
type Action string

const (
	// Fail makes Hit return an error wrapping ErrInjected: the operation fails and its caller's
	// retry path runs.
	Fail Action = "fail"
	// Kill sends SIGKILL to the process: it dies between the two writes.
	Kill Action = "kill"
)

// ErrInjected is wrapped by the errors of armed Fail points.
var ErrInjected = errors.New("flow: injected fault")

// Injector holds the armed points. The zero value and nil are disarmed; an Injector is safe for
// concurrent use.
type Injector struct {
	mu    sync.Mutex
	armed map[Point]*arming
	hits  map[Point]int
}

type arming struct {
	action Action
	// fn, when set, is run at the point instead of the action (ArmFunc).
	fn func()
	// skip hits pass before the point acts; it then acts times times (0: forever), on every
	// every-th hit (0 or 1: each hit).
	skip, times, every, seen int
}

// Arm makes point p act with action after skip hits, times times (0 means every hit).
func (f *Injector) Arm(p Point, action Action, skip, times int) {
	f.arm(p, &arming{action: action, skip: skip, times: times})
}

// ArmEvery makes point p act with action on every every-th hit, times times (0 means forever):
// a fault that comes and goes, as a flaky disk or network's does.
func (f *Injector) ArmEvery(p Point, action Action, every, times int) {
	f.arm(p, &arming{action: action, times: times, every: every})
}

// ArmFunc makes point p run fn, times times (0 means every hit), and then go on: a test
// interleaves another writer's work exactly there. fn runs on the goroutine that reached the
// point, with no lock held.
func (f *Injector) ArmFunc(p Point, times int, fn func()) {
	f.arm(p, &arming{fn: fn, times: times})
}

func (f *Injector) arm(p Point, a *arming) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.armed == nil {
		f.armed = map[Point]*arming{}
	}
	f.armed[p] = a
}

// Disarm stops point p from acting.
func (f *Injector) Disarm(p Point) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.armed, p)
}

// Hit is called at point p. It returns nil, unless p is armed to fail now; it does not return
// if p is armed to kill now, and returns once fn has run if p is armed with ArmFunc.
func (f *Injector) Hit(p Point) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	if f.hits == nil {
		f.hits = map[Point]int{}
	}
	f.hits[p]++
	a, ok := f.armed[p]
	act := ok && a.skip <= 0
	if ok && a.skip > 0 {
		a.skip--
	}
	if act && a.every > 1 {
		a.seen++
		act = a.seen%a.every == 0
	}
	if act && a.times > 0 {
		a.times--
		if a.times == 0 {
			delete(f.armed, p)
		}
	}
	f.mu.Unlock()
	if !act {
		return nil
	}
	if a.fn != nil {
		a.fn()
		return nil
	}
	if a.action == Kill {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	return fmt.Errorf("%w at %s", ErrInjected, p)
}

// Hits returns how many times point p was reached.
func (f *Injector) Hits(p Point) int {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[p]
}

// All returns every point of the package: those of the crash workload and of each feature.
func All() []Point {
	var all []Point
	for _, group := range [][]Point{Points, IngressPoints, StartPolicyPoints, RetentionPoints, ResetPoints, BatchPoints,
		TimeoutPoints, CancelPoints, PausePoints, SchedulePoints, PayloadPoints} {
		for _, p := range group {
			if !slices.Contains(all, p) {
				all = append(all, p)
			}
		}
	}
	return all
}

// EnvVar is the environment variable FromEnv reads.
const EnvVar = "FLOW_FAULTS"

// FromEnv returns an Injector armed as FLOW_FAULTS says, or nil when it is unset. The value
// lists arms separated by commas, each "point:action[:skip[:times]]", for example
// "after-append-before-task:kill:3" (kill the process at the fourth hit).
func FromEnv() (*Injector, error) {
	v := os.Getenv(EnvVar)
	if v == "" {
		return nil, nil
	}
	f := &Injector{}
	for _, arm := range strings.Split(v, ",") {
		parts := strings.Split(strings.TrimSpace(arm), ":")
		if len(parts) < 2 || len(parts) > 4 {
			return nil, fmt.Errorf("%s: %q is not point:action[:skip[:times]]", EnvVar, arm)
		}
		p, action := Point(parts[0]), Action(parts[1])
		if !slices.Contains(All(), p) {
			return nil, fmt.Errorf("%s: unknown point %q", EnvVar, p)
		}
		if action != Fail && action != Kill {
			return nil, fmt.Errorf("%s: action must be fail or kill, got %q", EnvVar, action)
		}
		n := [2]int{}
		for i, text := range parts[2:] {
			v, err := strconv.Atoi(text)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("%s: %q: skip and times must be non-negative numbers", EnvVar, arm)
			}
			n[i] = v
		}
		f.Arm(p, action, n[0], n[1])
	}
	return f, nil
}

// Points of schedules (docs/schedules.md), armed by the scheduler's schedule tests.
const (
	// ScheduleBeforeStart: a schedule's round decided to start a slot's run; nothing of the
	// round is written yet (neither the run's run.started nor the schedule's state).
	ScheduleBeforeStart Point = "schedule-before-start"
	// ScheduleAfterStartBeforeState: a schedule's round started its runs (and cancelled or
	// terminated the runs they replace); the schedule's state in FLOW_SCHEDULES is not updated
	// yet.
	ScheduleAfterStartBeforeState Point = "schedule-after-start-before-state"
)

// SchedulePoints lists the points of schedules.
var SchedulePoints = []Point{ScheduleBeforeStart, ScheduleAfterStartBeforeState}

// Points of offloaded payloads (docs/large-payloads.md), armed by the engine's payload tests (the
// crash workload of Points offloads nothing).
const (
	// AfterPayloadBeforeAppend: a payload is stored in FLOW_PAYLOADS; the event that refers to
	// it is not appended yet.
	AfterPayloadBeforeAppend Point = "after-payload-before-append"
	// PayloadBeforeTouch: a writer found the payload it offloads in FLOW_PAYLOADS already; it
	// has not touched the object yet (the write that keeps it from the collector).
	PayloadBeforeTouch Point = "payload-before-touch"
	// PayloadGCBeforeDelete: the payload collector decided to delete an object no retained
	// history refers to, on a fresh read of its metadata; the deletion is not written yet.
	PayloadGCBeforeDelete Point = "payload-gc-before-delete"
)

// PayloadPoints lists the points of offloaded payloads.
var PayloadPoints = []Point{AfterPayloadBeforeAppend, PayloadBeforeTouch, PayloadGCBeforeDelete}
