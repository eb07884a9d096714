package torture

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/pkg/event"
)

// This file is the checker's own interpreter of histories: a fold over the events it needs,
// written for the torture workflows (In), independent of internal/core's projection, which is
// under test.

// Run is one run as the checker understands it from its events.
type Run struct {
	ID string
	// Inc numbers the incarnations of the ID: a run ID that retention deleted can be started
	// again, from sequence 1.
	Inc    int
	Events []event.Envelope
	// payloads are the offloaded payloads the tap and the archives read, by hex SHA-256.
	payloads map[string]json.RawMessage
	// Stored is when the server stored each event's commit (for the events the tap saw).
	Stored map[uint64]time.Time
	// Anomalies are what is wrong with the history itself (gaps, an event out of place).
	Anomalies []string
	// Tombstone is the runs index's tombstone of a deleted run; Archive its archived history.
	Tombstone *Tombstone
	Archive   []event.Envelope

	Started  *event.RunStarted
	In       In
	Def      string
	Control  *event.FlowControl
	Schedule *event.ScheduleRef
	Reset    *event.ResetFrom
	// Created is when the run came into being: its run.started's time, or for a reset run
	// (whose copied prefix keeps the old run's times) when its first commit was stored, else
	// the time of its first own event.
	Created time.Time
	// End is the terminal event's time, EndType its type; zero while the run is active.
	End     time.Time
	EndType event.Type
	EndSeq  uint64
	// Until is when the run stopped counting as live: End, or earlier, the creation of the
	// run that replaced it (a reset or terminate_existing writes the new run first).
	Until time.Time
	// ReplacedBy names that run.
	ReplacedBy string

	Admitted   bool
	AdmittedAt time.Time
	// Admissions are the times of the run's own run.admitted events (not copied by a reset).
	Admissions []time.Time

	NotBefore       time.Time
	DelayFired      bool
	Paused          bool
	CancelRequested bool
	// Blocked is the detail of the latest decision.failed not followed by a decision.
	Blocked string

	Steps     map[string]*StepState
	Waits     map[string]*WaitState
	Awaited   map[string]string // signal wait ID -> name
	Signals   map[string]int    // received signals by name
	Children  map[string]*ChildState
	Updates   map[string]*UpdateState
	UpdateIDs []string // in the order received
	Resets    []ResetLink
	Successor string // continued as
	// Deliveries counts each delivery ID of signal.received, hook.received and the
	// cancellations, pauses and terminations that carry one.
	Deliveries map[string]int
}

// StepState is a step of a run.
type StepState struct {
	Settled   bool
	Completed bool
	RetryDue  time.Time // a retry scheduled and not fired
	Retrying  bool
}

// WaitState is a durable timer of a run.
type WaitState struct {
	Deadline time.Time
	Fired    bool
}

// ChildState is a child of a run.
type ChildState struct {
	RunID   string
	Settled bool
}

// UpdateState is an update of a run.
type UpdateState struct {
	Name                          string
	Payload                       json.RawMessage
	Received                      int
	ReceivedSeq                   uint64
	Accepted, Rejected, Completed int
	Result                        json.RawMessage
	Error                         *event.ErrorInfo
	// Aborted is set for an update a reset copied that its old run left unsettled when it
	// ended (reset_from.aborted_updates): its caller was answered "aborted", and the new run
	// does not judge it.
	Aborted bool
}

// ResetLink is a run.reset of a run.
type ResetLink struct {
	event.RunReset
	Seq uint64
	At  time.Time
}

// Tombstone is the part of a runs index tombstone the checker reads.
type Tombstone struct {
	At      time.Time `json:"at"`
	Archive string    `json:"archive,omitempty"`
	Purged  bool      `json:"purged,omitempty"`
	Msgs    uint64    `json:"msgs,omitempty"`
}

// Key names one incarnation of a run: the ID, and "#n" for the n-th start of an ID after its
// deletion.
func (r *Run) Key() string {
	if r.Inc == 0 {
		return r.ID
	}
	return fmt.Sprintf("%s#%d", r.ID, r.Inc)
}

// Ended reports whether the run has a terminal event.
func (r *Run) Ended() bool { return r.EndType != "" }

// Last returns the last sequence.
func (r *Run) Last() uint64 {
	if len(r.Events) == 0 {
		return 0
	}
	return r.Events[len(r.Events)-1].Seq
}

// Copied reports whether event seq of the run is a copy of another run's (a reset's prefix or
// reapplied inputs).
func (r *Run) Copied(seq uint64) bool {
	return r.Reset != nil && seq <= r.Reset.Seq+uint64(r.Reset.Reapplied)
}

// Family is the workflow ID the run belongs to: the caller's ID with the suffixes of resets
// ("=_reset-…"), reuses ("=_n") and continuations ("=n") removed. A child's ID part ("=kid")
// stays: a child is a workflow of its own.
func Family(runID string) string {
	for {
		i := strings.LastIndex(runID, "=")
		if i < 0 || !familySuffix.MatchString(runID[i+1:]) {
			return runID
		}
		runID = runID[:i]
	}
}

var familySuffix = regexp.MustCompile(`^(_reset-[0-9a-f]+|_[0-9]+|[0-9]+)$`)

// BuildRuns folds the tap's commits into runs, one per incarnation of each run ID, and fills
// what the tap missed of deleted runs from their archives.
func BuildRuns(commits []Commit, tombstones map[string]*Tombstone, archives map[string][]event.Envelope, payloads map[string]json.RawMessage) map[string]*Run {
	byID := map[string][]*Run{}
	all := maps.Clone(payloads)
	if all == nil {
		all = map[string]json.RawMessage{}
	}
	for _, c := range commits {
		maps.Copy(all, c.Payloads)
	}
	for _, c := range commits {
		incs := byID[c.RunID]
		var r *Run
		if len(incs) > 0 {
			r = incs[len(incs)-1]
		}
		if r == nil || (c.First == 1 && len(r.Events) > 0) {
			r = &Run{ID: c.RunID, Inc: len(incs), Stored: map[uint64]time.Time{}, payloads: all}
			byID[c.RunID] = append(incs, r)
		}
		if last := r.Last(); len(r.Events) > 0 && c.First != last+1 {
			r.Anomalies = append(r.Anomalies, fmt.Sprintf("commit at stream seq %d holds seq %d..%d after seq %d", c.StreamSeq, c.First, c.Last, last))
			if c.First <= last {
				continue
			}
		}
		for _, e := range c.Events {
			r.Events = append(r.Events, e)
			r.Stored[e.Seq] = c.At
		}
	}
	out := map[string]*Run{}
	for id, incs := range byID {
		if d := deletedIncarnation(incs, archives[id]); d != nil {
			d.Tombstone, d.Archive = tombstones[id], archives[id]
			d.fillFromArchive()
		} else if t := tombstones[id]; t != nil {
			incs[0].Tombstone = t
		}
		for _, r := range incs {
			r.fold()
			out[r.Key()] = r
		}
	}
	// Runs the tap never saw a commit of, known only from their archive.
	for id, arch := range archives {
		if _, ok := byID[id]; ok || len(arch) == 0 {
			continue
		}
		r := &Run{ID: id, Stored: map[uint64]time.Time{}, Tombstone: tombstones[id], Archive: arch, payloads: all}
		r.fillFromArchive()
		r.fold()
		out[r.Key()] = r
	}
	link(out)
	return out
}

// deletedIncarnation returns the incarnation an archive is of: the one whose run.started it
// holds (the tap saw it), else the first whose start the tap missed, else the first.
func deletedIncarnation(incs []*Run, archive []event.Envelope) *Run {
	if len(archive) == 0 || len(incs) == 0 {
		return nil
	}
	for _, r := range incs {
		if len(r.Events) > 0 && r.Events[0].Seq == 1 && r.Events[0].Time.Equal(archive[0].Time) {
			return r
		}
	}
	for _, r := range incs {
		if len(r.Events) == 0 || r.Events[0].Seq != 1 {
			return r
		}
	}
	return incs[0]
}

// fillFromArchive completes the events the tap missed (purged before it read them) from the
// archive.
func (r *Run) fillFromArchive() {
	if len(r.Archive) == 0 {
		return
	}
	have := map[uint64]bool{}
	for _, e := range r.Events {
		have[e.Seq] = true
	}
	merged := append([]event.Envelope(nil), r.Events...)
	for _, e := range r.Archive {
		if !have[e.Seq] {
			merged = append(merged, e)
		}
	}
	sort.Slice(merged, func(i, j int) bool { return merged[i].Seq < merged[j].Seq })
	r.Events = merged
}

func (r *Run) fold() {
	r.Steps, r.Waits, r.Awaited, r.Signals = map[string]*StepState{}, map[string]*WaitState{}, map[string]string{}, map[string]int{}
	r.Children, r.Updates, r.Deliveries = map[string]*ChildState{}, map[string]*UpdateState{}, map[string]int{}
	for i, e := range r.Events {
		if e.Seq != uint64(i+1) {
			r.Anomalies = append(r.Anomalies, fmt.Sprintf("event %d has seq %d (sequences are 1..n without gaps)", i+1, e.Seq))
			break
		}
	}
	for _, e := range r.Events {
		if r.Ended() && e.Type() != event.TypeRunReset && e.Type() != event.TypeRunDeleted && e.Type() != event.TypeRunDamageAccepted {
			r.Anomalies = append(r.Anomalies, fmt.Sprintf("seq %d %s follows the terminal event at seq %d", e.Seq, e.Type(), r.EndSeq))
		}
		r.apply(e)
	}
	if t, ok := r.Stored[1]; ok && r.Reset != nil {
		// The commit that created the reset run is its first: when the server stored it.
		r.Created = t
	}
	if r.Started != nil && r.Created.IsZero() {
		r.Created = r.Started0Time()
	}
	r.Until = r.End
}

// Started0Time is the time of the first event.
func (r *Run) Started0Time() time.Time {
	if len(r.Events) == 0 {
		return time.Time{}
	}
	return r.Events[0].Time
}

func (r *Run) delivery(id string) {
	if id != "" {
		r.Deliveries[id]++
	}
}

func (r *Run) step(id string) *StepState {
	s := r.Steps[id]
	if s == nil {
		s = &StepState{}
		r.Steps[id] = s
	}
	return s
}

// resolve returns the payload raw refers to when it is a reference to an offloaded payload the
// tap or an archive holds, else raw.
func (r *Run) resolve(raw json.RawMessage) json.RawMessage {
	if ref, ok := payload.Parse(raw); ok {
		if data, ok := r.payloads[ref.SHA256]; ok {
			return data
		}
	}
	return raw
}

func (r *Run) apply(e event.Envelope) {
	if r.Reset != nil && r.Created.IsZero() && e.Seq > r.Reset.Seq {
		r.Created = e.Time
	}
	switch p := e.Payload.(type) {
	case *event.RunStarted:
		if e.Seq != 1 {
			r.Anomalies = append(r.Anomalies, fmt.Sprintf("run.started at seq %d", e.Seq))
			return
		}
		r.Started, r.Def, r.Control, r.Schedule, r.Reset = p, p.Spec.Definition, p.Control, p.Schedule, p.ResetFrom
		r.NotBefore = p.NotBefore
		_ = json.Unmarshal(r.resolve(p.Input), &r.In)
		if r.Reset == nil {
			r.Created = e.Time
		}
	case *event.RunDebounced:
		r.NotBefore = p.NotBefore
		r.In = In{}
		_ = json.Unmarshal(r.resolve(p.Input), &r.In)
	case *event.RunDelayFired:
		r.DelayFired = true
	case *event.RunAdmitted:
		if r.Copied(e.Seq) && r.Reset.Readmit {
			break // a reset run is admitted anew: the old run's admission does not count
		}
		r.Admitted = true
		if r.Copied(e.Seq) {
			r.AdmittedAt = time.Time{} // set to Created once known (link)
		} else {
			r.AdmittedAt = e.Time
			r.Admissions = append(r.Admissions, e.Time)
		}
	case *event.StepScheduled:
		for _, s := range p.Steps {
			r.step(s.ID)
		}
		r.Blocked = ""
	case *event.StepCompleted:
		s := r.step(p.StepID)
		if s.Completed {
			r.Anomalies = append(r.Anomalies, fmt.Sprintf("step %q completed twice (seq %d)", p.StepID, e.Seq))
		}
		s.Settled, s.Completed, s.Retrying = true, true, false
	case *event.StepFailed:
		if p.Final {
			r.step(p.StepID).Settled = true
		}
	case *event.StepRetryScheduled:
		s := r.step(p.StepID)
		s.Retrying, s.RetryDue = true, p.Due
	case *event.StepRetryFired:
		r.step(p.StepID).Retrying = false
	case *event.StepCancelled:
		for _, s := range p.Steps {
			r.step(s.StepID).Settled = true
		}
	case *event.WaitScheduled:
		r.Waits[p.WaitID] = &WaitState{Deadline: p.Deadline}
		r.Blocked = ""
	case *event.WaitFired:
		if w := r.Waits[p.WaitID]; w != nil {
			w.Fired = true
		}
	case *event.SignalAwaited:
		r.Awaited[p.WaitID] = p.Name
		r.Blocked = ""
	case *event.SignalReceived:
		r.Signals[p.Name]++
		r.delivery(p.DeliveryID)
	case *event.HookReceived:
		r.delivery(p.DeliveryID)
	case *event.ChildScheduled:
		for _, c := range p.Children {
			r.Children[c.ChildID] = &ChildState{RunID: c.RunID}
		}
		r.Blocked = ""
	case *event.ChildRetryScheduled:
		if c := r.Children[p.ChildID]; c != nil {
			c.RunID = p.RunID
		}
	case *event.ChildSettled:
		if c := r.Children[p.ChildID]; c != nil {
			c.Settled = true
		}
	case *event.RunCancelRequested:
		r.CancelRequested = true
		r.delivery(p.DeliveryID)
	case *event.DecisionFailed:
		r.Blocked = p.Kind + ": " + p.Detail
	case *event.UpdateReceived:
		u := r.Updates[p.UpdateID]
		if u == nil {
			u = &UpdateState{Name: p.Name, Payload: r.resolve(p.Payload), ReceivedSeq: e.Seq,
				Aborted: r.Reset != nil && slices.Contains(r.Reset.AbortedUpdates, p.UpdateID)}
			r.Updates[p.UpdateID] = u
			r.UpdateIDs = append(r.UpdateIDs, p.UpdateID)
		}
		u.Received++
	case *event.UpdateAccepted:
		if u := r.Updates[p.UpdateID]; u != nil {
			u.Accepted++
		}
		r.Blocked = ""
	case *event.UpdateRejected:
		if u := r.Updates[p.UpdateID]; u != nil {
			u.Rejected++
		}
		r.Blocked = ""
	case *event.UpdateCompleted:
		if u := r.Updates[p.UpdateID]; u != nil {
			u.Completed++
			u.Result, u.Error = r.resolve(p.Result), p.Error
		}
		r.Blocked = ""
	case *event.RunPaused:
		r.Paused = true
		r.delivery(p.DeliveryID)
	case *event.RunUnpaused:
		r.Paused = false
		r.delivery(p.DeliveryID)
	case *event.RunReset:
		r.Resets = append(r.Resets, ResetLink{RunReset: *p, Seq: e.Seq, At: e.Time})
	case *event.RunFailed:
		r.delivery(p.DeliveryID)
	}
	if t := e.Type(); t.Terminal() {
		if r.Ended() {
			r.Anomalies = append(r.Anomalies, fmt.Sprintf("second terminal event %s at seq %d", t, e.Seq))
			return
		}
		r.EndType, r.End, r.EndSeq = t, e.Time, e.Seq
		if c, ok := e.Payload.(*event.RunContinuedAsNew); ok {
			r.Successor = c.SuccessorRunID
		}
	}
}

// link connects the runs: a run replaced by a reset or by a terminate_existing start stops
// counting as live when its replacement is created, and a run whose admission a reset copied
// counts as admitted from its creation.
func link(runs map[string]*Run) {
	latest := map[string]*Run{} // run ID -> its latest incarnation
	for _, r := range runs {
		if l := latest[r.ID]; l == nil || r.Inc > l.Inc {
			latest[r.ID] = r
		}
	}
	for _, r := range runs {
		if r.Admitted && r.AdmittedAt.IsZero() {
			r.AdmittedAt = r.Created
		}
		if r.Created.IsZero() {
			continue
		}
		switch {
		case r.Reset != nil:
			replaced(latest[r.Reset.RunID], r)
		case r.Started != nil && r.Started.StartPolicy != nil && r.Started.StartPolicy.Replaces:
			// The start terminates the run it found live or, when that run continued as new
			// meanwhile, its latest continuation (engine.replace): each run of that chain that
			// ended after the new run was created ended for it.
			old := latest[r.Started.StartPolicy.Previous]
			for range maxChain {
				if old == nil {
					break
				}
				replaced(old, r)
				if old.Successor == "" {
					break
				}
				old = latest[old.Successor]
			}
		}
	}
}

// maxChain bounds the continuations link follows.
const maxChain = 64

// replaced records that old, if it ended after run r's creation, ended for r: it stops counting
// as live when r was created (or, created after r, it never counts).
func replaced(old, r *Run) {
	if old == nil || !old.Ended() || old.End.Before(r.Created) {
		return
	}
	if old.ReplacedBy == "" || r.Created.Before(old.Until) {
		old.Until, old.ReplacedBy = maxTime(r.Created, old.Created), r.Key()
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// LiveAt reports whether the run was live (started, not yet ended or replaced) at t.
func (r *Run) LiveAt(t time.Time) bool {
	if r.Created.IsZero() || t.Before(r.Created) {
		return false
	}
	return !r.Ended() || t.Before(r.Until)
}

// HoldsSlotAt reports whether the run held a flow-control slot at t: admitted at or before t,
// and neither ended nor replaced by then.
func (r *Run) HoldsSlotAt(t time.Time) bool {
	if !r.Admitted || t.Before(r.AdmittedAt) {
		return false
	}
	return !r.Ended() || t.Before(r.Until)
}

// Awaits reports whether the run has an unanswered wait for signal name: awaited, and no
// signal of that name received.
func (r *Run) signalArrived(name string) bool { return r.Signals[name] > 0 }

// Next says what the script (In) decides next, from the run's state: "" when the run waits for
// something outside it (a signal it awaits, nothing at all), else what it waits for or what
// is due. It mirrors the workflow function script in workflows.go.
func (r *Run) Next(now time.Time) (waiting, due string) {
	for _, id := range r.UpdateIDs {
		u := r.Updates[id]
		if u.Aborted || u.Accepted == 0 || u.Completed > 0 {
			continue
		}
		st := r.Steps["u-"+id]
		switch {
		case st == nil:
			return "", fmt.Sprintf("a step for open update %q", id)
		case st.Completed:
			return "", fmt.Sprintf("the completion of update %q", id)
		default:
			return r.stepWait("u-" + id)
		}
	}
	for i := range r.In.Steps {
		id := fmt.Sprintf("s%d", i)
		st := r.Steps[id]
		switch {
		case st == nil:
			return "", fmt.Sprintf("the scheduling of step %s", id)
		case st.Completed:
			continue
		case st.Settled:
			return "", fmt.Sprintf("the end of the run after step %s failed", id)
		default:
			return r.stepWait(id)
		}
	}
	if r.In.NapMs > 0 {
		w := r.Waits["nap"]
		switch {
		case w == nil:
			return "", "the nap's timer"
		case !w.Fired:
			if now.After(w.Deadline) {
				return "", fmt.Sprintf("the firing of timer nap (due %s)", w.Deadline.Format(timeFormat))
			}
			return "timer nap", ""
		}
	}
	if r.In.Go && !r.signalArrived(SignalGo) {
		if _, ok := r.Awaited[SignalGo]; ok {
			return "signal go", ""
		}
		return "", "the wait for signal go"
	}
	if r.In.Child {
		c := r.Children["kid"]
		switch {
		case c == nil:
			return "", "the start of child kid"
		case !c.Settled:
			return "child " + c.RunID, ""
		}
	}
	if r.In.Gen < r.In.CAN {
		return "", "the continuation"
	}
	return "", "the completion"
}

func (r *Run) stepWait(id string) (waiting, due string) {
	st := r.Steps[id]
	if st.Retrying {
		return "retry of step " + id, ""
	}
	return "", "the result of step " + id
}

const timeFormat = "15:04:05.000"

// Obligation says what a live run still owes, or "" when it only waits for something the
// sequence will never send (a signal, an unpause, a slot held by such a run). now is the
// check's time; free reports whether a flow-control slot is free for the run now.
func (r *Run) Obligation(now time.Time, defPaused bool, free func(*Run) bool) string {
	if r.Ended() || r.Started == nil {
		return ""
	}
	if r.Blocked != "" {
		return "is blocked: " + r.Blocked
	}
	if !r.NotBefore.IsZero() && !r.DelayFired {
		if r.CancelRequested {
			return "was asked to cancel while delayed and did not end"
		}
		if now.After(r.NotBefore) {
			return fmt.Sprintf("is delayed until %s, which passed, and its delay did not fire", r.NotBefore.Format(timeFormat))
		}
		return ""
	}
	if r.Control != nil && !r.Admitted {
		if r.CancelRequested {
			if r.Paused || defPaused {
				return "" // answered once unpaused (docs/pause.md)
			}
			return "was asked to cancel while queued and did not end"
		}
		if free(r) {
			return "is queued for admission while its limits have room"
		}
		return ""
	}
	for id, w := range r.Waits {
		if !w.Fired && now.After(w.Deadline) {
			return fmt.Sprintf("has timer %s due at %s, not fired", id, w.Deadline.Format(timeFormat))
		}
	}
	for id, s := range r.Steps {
		if s.Retrying && !s.RetryDue.IsZero() && now.After(s.RetryDue) {
			return fmt.Sprintf("has the retry of step %s due at %s, not fired", id, s.RetryDue.Format(timeFormat))
		}
	}
	if r.Paused || defPaused {
		return ""
	}
	if r.CancelRequested {
		return "was asked to cancel and did not end"
	}
	for _, id := range r.UpdateIDs {
		if u := r.Updates[id]; !u.Aborted && u.Accepted == 0 && u.Rejected == 0 {
			return fmt.Sprintf("has update %q received and not judged", id)
		}
	}
	if _, due := r.Next(now); due != "" {
		return "owes " + due
	}
	return ""
}
