package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// The reset workload, "order": reserve (step) -> hook "confirm" -> signal "go" -> charge (step)
// -> complete. Its history, once done:
//
//	1 run.started  2 step.scheduled reserve  3 step.completed  4 hook.created confirm
//	5 hook.received  6 signal.awaited go  7 signal.received  8 step.scheduled charge
//	9 step.completed  10 run.completed
//
// Reset points: 1, 3, 5, 7, 9.
type orderIn struct {
	Item string `json:"item"`
	Qty  int    `json:"qty"`
}

type resetBed struct {
	e     *engine.Engine
	host  *jshost.Host
	st    *jsstore.Store
	f     *fault.Injector
	mu    sync.Mutex
	calls map[string]int // step name -> attempts run
}

func resetSetup(t *testing.T) *resetBed {
	t.Helper()
	ctx := t.Context()
	js := natstest.NewJetStream(t)
	st, err := jsstore.New(ctx, js, nil)
	require.NoError(t, err)
	host := newJSHost(t, js)
	b := &resetBed{st: st, host: host, f: &fault.Injector{}, calls: map[string]int{}}
	reg := flow.NewRegistry(nil)
	flow.RegisterWorkflow(reg, "order", func(ctx *flow.Context, in orderIn) (flow.Decision, error) {
		key := ctx.UUID() // drawn from the seed: a reset run must draw the same
		if ctx.StepOutput("reserve") == nil {
			return ctx.ScheduleStep("reserve", "reserve", map[string]any{"item": in.Item, "qty": in.Qty, "key": key}), nil
		}
		if ctx.Hook("confirm") == nil {
			return ctx.CreateHook("confirm", map[string]string{"item": in.Item}), nil
		}
		sig := ctx.Signal("go")
		if sig == nil {
			return ctx.AwaitSignal("go", "go"), nil
		}
		if ctx.StepOutput("charge") == nil {
			return ctx.ScheduleStep("charge", "charge", map[string]any{"qty": in.Qty, "go": sig}), nil
		}
		return ctx.Complete(map[string]any{"charged": ctx.StepOutput("charge")}), nil
	})
	count := func(name string) int {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.calls[name]++
		return b.calls[name]
	}
	flow.RegisterStep(reg, "reserve", func(_ context.Context, in map[string]any) (string, error) {
		return "reserved-" + strconv.Itoa(count("reserve")), nil
	})
	flow.RegisterStep(reg, "charge", func(_ context.Context, in map[string]any) (string, error) {
		return "charged-" + strconv.Itoa(count("charge")), nil
	})
	keys, err := jshost.NewStartKeys(ctx, js)
	require.NoError(t, err)
	b.e, err = engine.New(engine.Config{Store: st, Host: host, Runtime: sdk.RuntimeOf(reg), Replayer: sdk.RuntimeOf(reg).Replaying(), Logger: natstest.Logger(),
		CacheSize: -1, Faults: b.f, Keys: keys})
	require.NoError(t, err)
	return b
}

func (b *resetBed) history(t *testing.T, runID string) []event.Envelope {
	t.Helper()
	h, err := b.st.Load(t.Context(), runID, 0)
	require.NoError(t, err)
	return h
}

func (b *resetBed) snapshot(t *testing.T, runID string) *core.Snapshot {
	t.Helper()
	s, err := b.e.Snapshot(t.Context(), runID)
	require.NoError(t, err)
	return s
}

func (b *resetBed) drive(t *testing.T, runID string) core.Status {
	t.Helper()
	res, err := b.e.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	if res.Err != nil {
		t.Logf("run %s blocked: %v", runID, res.Err)
	}
	return res.Status
}

// start starts an order and drives it to its signal wait (seq 6), or, with finish, to its end.
func (b *resetBed) start(t *testing.T, runID string, finish bool) {
	t.Helper()
	ctx := t.Context()
	_, _, err := b.e.Start(ctx, engine.StartParams{RunID: runID, Spec: event.Spec{Definition: "order"}, Input: []byte(`{"item":"book","qty":1}`)})
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, b.drive(t, runID))
	b.deliverHook(t, runID, "d-"+runID)
	require.Equal(t, core.StatusSuspended, b.drive(t, runID))
	if finish {
		b.signal(t, runID, "s-"+runID)
		require.Equal(t, core.StatusCompleted, b.drive(t, runID))
		require.Len(t, b.history(t, runID), 10)
	}
}

func (b *resetBed) deliverHook(t *testing.T, runID, delivery string) {
	t.Helper()
	tok := b.snapshot(t, runID).Hooks["confirm"].Token
	_, err := b.e.DeliverHook(t.Context(), tok, []byte(`{"ok":true}`), delivery)
	require.NoError(t, err)
}

func (b *resetBed) signal(t *testing.T, runID, delivery string) string {
	t.Helper()
	to, err := b.e.Signal(t.Context(), runID, "go", []byte(`"now"`), delivery)
	require.NoError(t, err)
	return to
}

// checkBoth runs the invariants checker on both runs and the reset's link check.
func (b *resetBed) checkBoth(t *testing.T, oldID, newID string) {
	t.Helper()
	old, nw := b.history(t, oldID), b.history(t, newID)
	require.Empty(t, core.Check(oldID, old), "old run %s", oldID)
	require.Empty(t, core.Check(newID, nw), "new run %s", newID)
	require.Empty(t, core.CheckReset(oldID, old, newID, nw))
}

// --to SEQ on a completed run: the prefix 1..3 is copied, the signal recorded after it is
// reapplied, the hook delivery is not (its hook was created after the point); the new run
// creates the hook again with a token of its own, and completes.
func TestResetToSeq(t *testing.T) {
	t.Parallel()
	b := resetSetup(t)
	ctx := t.Context()
	b.start(t, "o1", true)
	oldTok := b.snapshot(t, "o1").Hooks["confirm"].Token

	newID, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o1", Mode: event.ResetToSeq, Seq: 3, Reason: "test"})
	require.NoError(t, err)
	require.Contains(t, newID, "o1=_reset-")
	again, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o1", Mode: event.ResetToSeq, Seq: 3, Reason: "test"})
	require.NoError(t, err)
	require.Equal(t, newID, again, "a repeat returns the same run")

	nw := b.history(t, newID)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeStepScheduled, event.TypeStepCompleted, event.TypeSignalReceived}, typesOf(nw))
	rf := nw[0].Payload.(*event.RunStarted).ResetFrom
	require.Equal(t, &event.ResetFrom{RunID: "o1", Seq: 3, Mode: event.ResetToSeq, Reason: "test", CopiedTo: 10, Reapplied: 1, SeedRunID: "o1", Readmit: true}, rf)
	require.Equal(t, "s-o1", nw[3].Payload.(*event.SignalReceived).DeliveryID, "the reapplied signal keeps its delivery ID")
	old := b.history(t, "o1")
	require.Len(t, old, 11, "one run.reset, after the terminal event")
	r := old[10].Payload.(*event.RunReset)
	require.Equal(t, newID, r.NewRunID)
	require.False(t, r.Terminated, "the old run had ended")

	require.Equal(t, core.StatusSuspended, b.drive(t, newID), "the copied decisions replay; the hook is created again")
	s := b.snapshot(t, newID)
	require.NotEqual(t, oldTok, s.Hooks["confirm"].Token, "a hook created after the point gets a token of the new run")
	b.deliverHook(t, newID, "d-new")
	require.Equal(t, core.StatusCompleted, b.drive(t, newID), "the reapplied signal was waiting")
	require.Equal(t, map[string]int{"reserve": 1, "charge": 2}, b.calls, "reserve is copied, charge ran again")
	b.checkBoth(t, "o1", newID)
	require.Equal(t, newID, b.snapshot(t, "o1").Summary().ResetTo)
	require.Equal(t, "o1", b.snapshot(t, newID).Summary().ResetFrom)

	// --drop-inputs: the signal is not reapplied; the new run waits for one.
	dropID, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o1", Mode: event.ResetToSeq, Seq: 5, DropInputs: true})
	require.NoError(t, err)
	require.NotEqual(t, newID, dropID)
	require.Len(t, b.history(t, dropID), 5, "the copy only: the hook delivery at 5 is copied, the signal dropped")
	require.Equal(t, core.StatusSuspended, b.drive(t, dropID))
	require.Equal(t, oldTok, b.snapshot(t, dropID).Hooks["confirm"].Token, "a copied hook keeps its token")
	b.signal(t, dropID, "s-drop")
	require.Equal(t, core.StatusCompleted, b.drive(t, dropID))
	b.checkBoth(t, "o1", dropID)
}

// A point that is not a decision boundary is refused, with the nearest points; nothing is
// appended.
func TestResetBadPoints(t *testing.T) {
	t.Parallel()
	b := resetSetup(t)
	ctx := t.Context()
	b.start(t, "o2", true)
	_, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o2", Mode: event.ResetToSeq, Seq: 4})
	var pe *core.ResetPointError
	require.ErrorAs(t, err, &pe)
	require.ErrorIs(t, err, core.ErrInvalidInput)
	require.Equal(t, uint64(3), pe.Before)
	require.Equal(t, uint64(5), pe.After)
	require.Equal(t, []uint64{1, 3, 5, 7, 9}, pe.Points)
	require.ErrorContains(t, err, "seq 4 is not a reset point: it is an event of a decision (hook.created)")
	require.ErrorContains(t, err, "nearest reset points: 3 (before), 5 (after)")
	_, err = b.e.Reset(ctx, engine.ResetParams{RunID: "o2", Mode: event.ResetToSeq, Seq: 10})
	require.ErrorContains(t, err, "terminal event")
	_, err = b.e.Reset(ctx, engine.ResetParams{RunID: "o2", Mode: event.ResetToSeq, Seq: 99})
	require.ErrorContains(t, err, "the run has 10 events")
	_, err = b.e.Reset(ctx, engine.ResetParams{RunID: "o2", Mode: event.ResetToStep, StepID: "nope"})
	require.ErrorContains(t, err, `no step "nope" was scheduled`)
	_, err = b.e.Reset(ctx, engine.ResetParams{RunID: "o2", Mode: event.ResetToSeq, Seq: 3, Input: []byte(`1`)})
	require.ErrorContains(t, err, "only a rerun replaces the input")
	_, err = b.e.Reset(ctx, engine.ResetParams{RunID: "missing", Mode: event.ResetToLastDecision})
	require.ErrorIs(t, err, core.ErrNotFound)
	require.Len(t, b.history(t, "o2"), 10, "nothing appended")

	// One request ID, two different resets.
	_, err = b.e.Reset(ctx, engine.ResetParams{RunID: "o2", Mode: event.ResetToSeq, Seq: 3, RequestID: "r-1"})
	require.NoError(t, err)
	_, err = b.e.Reset(ctx, engine.ResetParams{RunID: "o2", Mode: event.ResetToSeq, Seq: 5, RequestID: "r-1"})
	require.ErrorIs(t, err, engine.ErrResetConflict)
}

// --to-step charge: the new run copies up to the signal (7) and schedules charge again.
func TestResetToStep(t *testing.T) {
	t.Parallel()
	b := resetSetup(t)
	b.start(t, "o3", true)
	newID, err := b.e.Reset(t.Context(), engine.ResetParams{RunID: "o3", Mode: event.ResetToStep, StepID: "charge"})
	require.NoError(t, err)
	require.Len(t, b.history(t, newID), 7)
	require.Equal(t, core.StatusCompleted, b.drive(t, newID))
	require.Equal(t, map[string]int{"reserve": 1, "charge": 2}, b.calls)
	out := b.snapshot(t, newID).Outcome.Output
	require.JSONEq(t, `{"charged":"charged-2"}`, string(out))
	b.checkBoth(t, "o3", newID)
}

// --to-last-decision of an active run (waiting on its signal at 6): the point is 5, the old
// run records run.reset and is terminated in the same commit, and a signal sent to the old
// run's ID afterwards goes to the new run.
func TestResetToLastDecisionOfActiveRun(t *testing.T) {
	t.Parallel()
	b := resetSetup(t)
	b.start(t, "o4", false)
	newID, err := b.e.Reset(t.Context(), engine.ResetParams{RunID: "o4", Mode: event.ResetToLastDecision, Reason: "fixed code"})
	require.NoError(t, err)
	old := b.history(t, "o4")
	require.Equal(t, []event.Type{event.TypeRunReset, event.TypeRunFailed}, typesOf(old[6:]), "run.reset, then the termination")
	require.True(t, old[6].Payload.(*event.RunReset).Terminated)
	require.Equal(t, event.CauseOperator, old[7].Payload.(*event.RunFailed).Cause)
	require.Equal(t, uint64(5), b.history(t, newID)[0].Payload.(*event.RunStarted).ResetFrom.Seq)
	require.Equal(t, core.StatusSuspended, b.drive(t, newID))
	require.Equal(t, newID, b.signal(t, "o4", "s-late"), "the old run passes the signal on")
	require.Equal(t, core.StatusCompleted, b.drive(t, newID))
	b.checkBoth(t, "o4", newID)
}

// rerun --from-step: without --input, from reserve (point 1), every step runs again and the
// signal is reapplied; with --input from reserve, the new input is used; with --input from
// charge, the copied step.scheduled of reserve recorded the old input, so the replay of the
// copy is a non-determinism error naming the field, and the run is blocked.
func TestRerunFromStep(t *testing.T) {
	t.Parallel()
	b := resetSetup(t)
	ctx := t.Context()
	b.start(t, "o5", true)

	plain, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o5", Mode: event.ResetRerun, StepID: "reserve"})
	require.NoError(t, err)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeSignalReceived}, typesOf(b.history(t, plain)))
	require.Equal(t, core.StatusSuspended, b.drive(t, plain))
	b.deliverHook(t, plain, "d-plain")
	require.Equal(t, core.StatusCompleted, b.drive(t, plain))
	b.checkBoth(t, "o5", plain)
	reserve := b.snapshot(t, plain).Steps["reserve"]
	require.Equal(t, b.snapshot(t, "o5").Steps["reserve"].Input, reserve.Input, "the same input, and the same ctx.UUID() drawn from the seed")

	withInput, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o5", Mode: event.ResetRerun, StepID: "reserve", Input: []byte(`{"item":"pen","qty":3}`), DropInputs: true})
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, b.drive(t, withInput))
	s := b.snapshot(t, withInput)
	require.True(t, s.ResetFrom.InputReplaced)
	var in map[string]any
	require.NoError(t, json.Unmarshal(s.Steps["reserve"].Input, &in))
	require.Equal(t, "pen", in["item"])
	b.checkBoth(t, "o5", withInput)
	_, err = b.e.Terminate(ctx, withInput, "done with it") // a reset never leaves two live runs of a chain
	require.NoError(t, err)

	blocked, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o5", Mode: event.ResetRerun, StepID: "charge", Input: []byte(`{"item":"pen","qty":3}`)})
	require.NoError(t, err)
	res, err := b.e.Drive(ctx, blocked, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusBlocked, res.Status)
	var nd *core.NonDeterminismError
	require.ErrorAs(t, res.Err, &nd)
	require.Equal(t, "reserve", nd.ID)
	require.Equal(t, "input", nd.Field)
	b.checkBoth(t, "o5", blocked)
}

// A crash between the old run's run.reset and the new run's start (fault point
// after-reset-record-before-start) is repaired by whoever comes next: an input sent to the old
// run, which follows the reset, writes the new run first; the history service, applying the
// old run's commit that holds run.reset, writes it too. Either way the new run is written once,
// however often the commit is applied.
func TestResetCrashBetweenWritesIsRepaired(t *testing.T) {
	t.Parallel()
	b := resetSetup(t)
	ctx := t.Context()
	b.start(t, "o6", false)
	b.f.Arm(fault.AfterResetRecordBeforeStart, fault.Fail, 0, 1)
	newID, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o6", Mode: event.ResetToSeq, Seq: 5})
	require.NoError(t, err, "the reset is recorded")
	require.Equal(t, 1, b.f.Hits(fault.AfterResetRecordBeforeStart))
	require.True(t, b.snapshot(t, "o6").Terminal(), "the record ended the old run")
	require.Empty(t, b.history(t, newID), "the crash left the new run unwritten")

	// A signal sent to the old run follows the reset: it writes the new run, then delivers.
	require.Equal(t, newID, b.signal(t, "o6", "s-meanwhile"))
	require.Equal(t, event.TypeSignalReceived, b.history(t, newID)[5].Type(), "the signal reached the new run")
	old := b.history(t, "o6")
	for range 2 {
		require.NoError(t, b.e.ApplyCommit(ctx, b.snapshot(t, "o6"), old[len(old)-2:]))
	}
	require.Len(t, b.history(t, newID), 6, "applying the record again writes nothing")
	require.Equal(t, core.StatusCompleted, b.drive(t, newID))

	// Nothing but the history service: applying the old run's commit writes the new run.
	b.start(t, "o7", false)
	b.f.Arm(fault.AfterResetRecordBeforeStart, fault.Fail, 0, 1)
	newID7, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o7", Mode: event.ResetToSeq, Seq: 3})
	require.NoError(t, err)
	require.Empty(t, b.history(t, newID7))
	old7 := b.history(t, "o7")
	require.NoError(t, b.e.ApplyCommit(ctx, b.snapshot(t, "o7"), old7[len(old7)-2:]))
	require.Equal(t, core.StatusSuspended, b.drive(t, newID7))
	b.checkBoth(t, "o6", newID)
	b.checkBoth(t, "o7", newID7)
}

// A reset never leaves two live runs of one chain. Once a reset ended
// run o9 and its new run is active, a second reset of o9 is refused, naming the run to reset
// instead, and a signal sent twice under one delivery ID lands once; after the first reset's
// run ends, o9 may be reset again. Two resets of one active run racing each other: one is
// recorded, the other is refused.
func TestResetNeverLeavesTwoLiveRuns(t *testing.T) {
	t.Parallel()
	b := resetSetup(t)
	ctx := t.Context()
	b.start(t, "o9", true)
	first, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o9", Mode: event.ResetToSeq, Seq: 3})
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, b.drive(t, first), "the first reset's run waits on its hook")
	require.Equal(t, first, b.signal(t, "o9", "s-twice"))

	_, err = b.e.Reset(ctx, engine.ResetParams{RunID: "o9", Mode: event.ResetToSeq, Seq: 5})
	var active *engine.ActiveResetError
	require.ErrorAs(t, err, &active)
	require.ErrorIs(t, err, engine.ErrRunExists)
	require.Equal(t, first, active.Head)
	require.ErrorContains(t, err, "reset \""+first+"\" instead")
	require.Equal(t, first, b.signal(t, "o9", "s-twice"), "the sender's retry reaches the same run")
	n := 0
	for _, e := range b.history(t, first) {
		if r, ok := e.Payload.(*event.SignalReceived); ok && r.DeliveryID == "s-twice" {
			n++
		}
	}
	require.Equal(t, 1, n, "applied once")
	require.Len(t, b.history(t, "o9"), 11, "the refused reset recorded nothing")

	// Once the first reset's run has ended, o9 may be reset again.
	_, err = b.e.Terminate(ctx, first, "done with it")
	require.NoError(t, err)
	second, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o9", Mode: event.ResetToSeq, Seq: 5})
	require.NoError(t, err)
	require.NotEqual(t, first, second)

	// Two resets of an active run at once: exactly one is recorded.
	b.start(t, "o10", false)
	errs := make([]error, 2)
	ids := make([]string, 2)
	var wg sync.WaitGroup
	for i, seq := range []uint64{3, 5} {
		wg.Go(func() {
			ids[i], errs[i] = b.e.Reset(ctx, engine.ResetParams{RunID: "o10", Mode: event.ResetToSeq, Seq: seq})
		})
	}
	wg.Wait()
	won := 0
	for i := range errs {
		if errs[i] == nil {
			won++
			continue
		}
		require.ErrorAs(t, errs[i], &active)
	}
	require.Equal(t, 1, won, "one reset recorded, the other refused: %v", errs)
	resets := 0
	for _, e := range b.history(t, "o10") {
		if e.Type() == event.TypeRunReset {
			resets++
		}
	}
	require.Equal(t, 1, resets)
}

// A run that a later run of its ID superseded cannot be reset (torture finding O11): its new
// run would be live beside the ID's latest run, where a start under the ID does not look, so a
// start with reuse allowed made a second live run. The refusal names the run to reset instead;
// the latest run can be reset.
func TestResetOfASupersededRunIsRefused(t *testing.T) {
	t.Parallel()
	b := resetSetup(t)
	ctx := t.Context()
	b.start(t, "sup", true)
	reuse, _, err := b.e.Start(ctx, engine.StartParams{RunID: "sup", Spec: event.Spec{Definition: "order"},
		Input: []byte(`{"item":"book","qty":1}`), Reuse: event.ReuseAllow})
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, b.drive(t, reuse))
	_, err = b.e.Terminate(ctx, reuse, "done with it")
	require.NoError(t, err)

	_, err = b.e.Reset(ctx, engine.ResetParams{RunID: "sup", Mode: event.ResetToSeq, Seq: 3})
	var superseded *engine.SupersededResetError
	require.ErrorAs(t, err, &superseded)
	require.ErrorIs(t, err, engine.ErrRunExists)
	require.Equal(t, reuse, superseded.Latest)
	require.ErrorContains(t, err, "reset \""+reuse+"\" (or the run it continued or was reset as) instead")
	for _, e := range b.history(t, "sup") {
		require.NotEqual(t, event.TypeRunReset, e.Type(), "the refused reset recorded nothing")
	}

	newID, err := b.e.Reset(ctx, engine.ResetParams{RunID: reuse, Mode: event.ResetToSeq, Seq: 3})
	require.NoError(t, err, "the latest run can be reset")
	again, created, err := b.e.Start(ctx, engine.StartParams{RunID: "sup", Spec: event.Spec{Definition: "order"},
		Input: []byte(`{"item":"book","qty":1}`), Reuse: event.ReuseAllow})
	require.NoError(t, err)
	require.False(t, created, "a start under the ID finds the reset's live run %s", newID)
	require.Equal(t, reuse, again)
}

// Resets of two ended runs of one workflow at once (its first run and a later run that reuses
// its ID, as a batch job resets them side by side): the later run's reset is recorded, and the
// first run's is refused (a later run superseded it, or, had it come first, the workflow goes
// on in the other's new run); a workflow never has two live runs.
func TestResetsOfOneWorkflowAtOnce(t *testing.T) {
	t.Parallel()
	b := resetSetup(t)
	ctx := t.Context()
	for i := range 4 {
		id := fmt.Sprintf("w%d", i)
		b.start(t, id, true)
		reuse, _, err := b.e.Start(ctx, engine.StartParams{RunID: id, Spec: event.Spec{Definition: "order"},
			Input: []byte(`{"item":"book","qty":1}`), Reuse: event.ReuseAllow})
		require.NoError(t, err)
		require.Equal(t, event.ReuseRunID(id, 1), reuse)
		require.Equal(t, core.StatusSuspended, b.drive(t, reuse))
		b.deliverHook(t, reuse, "d-"+reuse)
		require.Equal(t, core.StatusSuspended, b.drive(t, reuse))
		b.signal(t, reuse, "s-"+reuse)
		require.Equal(t, core.StatusCompleted, b.drive(t, reuse))

		errs := make([]error, 2)
		var wg sync.WaitGroup
		for j, run := range []string{id, reuse} {
			wg.Go(func() {
				_, errs[j] = b.e.Reset(ctx, engine.ResetParams{RunID: run, Mode: event.ResetToSeq, Seq: 3})
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
				continue
			}
			require.ErrorIs(t, err, engine.ErrRunExists)
		}
		require.Equal(t, 1, won, "one reset of workflow %s recorded, the other refused: %v", id, errs)
		require.NoError(t, errs[1], "the latest run's reset is the one recorded")
	}
}

// A hook copied while pending keeps its token, and the token's route moves to the new run once
// the old run has ended, when the history service applies the new run's first commit (the
// resetter writes no route): a delivery with the old token reaches the new run.
func TestResetMovesCopiedHookTokens(t *testing.T) {
	t.Parallel()
	b := resetSetup(t)
	ctx := t.Context()
	_, _, err := b.e.Start(ctx, engine.StartParams{RunID: "o8", Spec: event.Spec{Definition: "order"}, Input: []byte(`{"item":"book","qty":1}`)})
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, b.drive(t, "o8"), "waits on hook confirm (seq 4)")
	b.signal(t, "o8", "s-early") // seq 5, buffered: a reset point with the hook pending
	require.Equal(t, core.StatusSuspended, b.drive(t, "o8"))
	tok := b.snapshot(t, "o8").Hooks["confirm"].Token

	newID, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o8", Mode: event.ResetToSeq, Seq: 5})
	require.NoError(t, err)
	require.True(t, b.snapshot(t, "o8").Terminal(), "the reset ended the old run")
	require.Equal(t, core.StatusSuspended, b.drive(t, newID))
	require.Equal(t, tok, b.snapshot(t, newID).Hooks["confirm"].Token)
	run, _ := b.routeOf(t, tok)
	require.Equal(t, "o8", run, "the resetter moved no route")
	require.NoError(t, b.e.ApplyCommit(ctx, b.snapshot(t, newID), b.history(t, newID)[:1]))
	run, hook := b.routeOf(t, tok)
	require.Equal(t, newID, run, "the consequence of the new run's first commit: the token is taken over from the ended run")
	require.Equal(t, "confirm", hook)
	to, err := b.e.DeliverHook(ctx, tok, []byte(`{"ok":true}`), "d-8")
	require.NoError(t, err)
	require.Equal(t, newID, to, "the old token routes to the new run")
	require.Equal(t, core.StatusCompleted, b.drive(t, newID))
	b.checkBoth(t, "o8", newID)
}

// routeOf returns the run and hook token routes to.
func (b *resetBed) routeOf(t *testing.T, token string) (string, string) {
	t.Helper()
	run, hook, err := b.host.LookupHook(t.Context(), token)
	require.NoError(t, err)
	return run, hook
}

// A delivery to a copied hook's token right after a reset, before anything moved the token's
// route (only the history service does, as the consequence of the reset run's first commit),
// reaches the reset run: DeliverHook follows the reset from the run the route names, as inputs
// do, writing the reset run first when the crash left it unwritten, and through a reset of the
// reset run. A hook the old run created after the reset point has no copy in the new run: a
// delivery to its token is refused as the ended run refuses it.
func TestHookDeliveryRightAfterResetReachesTheResetRun(t *testing.T) {
	t.Parallel()
	b := resetSetup(t)
	ctx := t.Context()
	_, _, err := b.e.Start(ctx, engine.StartParams{RunID: "o11", Spec: event.Spec{Definition: "order"}, Input: []byte(`{"item":"book","qty":1}`)})
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, b.drive(t, "o11"), "waits on hook confirm (seq 4)")
	b.signal(t, "o11", "s-early") // seq 5: a reset point with the hook pending
	require.Equal(t, core.StatusSuspended, b.drive(t, "o11"))
	tok := b.snapshot(t, "o11").Hooks["confirm"].Token

	// The reset is recorded; the process dies before it writes the new run.
	b.f.Arm(fault.AfterResetRecordBeforeStart, fault.Fail, 0, 1)
	newID, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o11", Mode: event.ResetToSeq, Seq: 5})
	require.NoError(t, err)
	require.Empty(t, b.history(t, newID), "the new run is not written yet")
	run, _ := b.routeOf(t, tok)
	require.Equal(t, "o11", run, "the route still names the old run")

	to, err := b.e.DeliverHook(ctx, tok, []byte(`{"ok":true}`), "d-11")
	require.NoError(t, err, "the delivery follows the reset")
	require.Equal(t, newID, to)
	nw := b.history(t, newID)
	require.Equal(t, event.TypeHookReceived, nw[len(nw)-1].Type(), "the reset run received the delivery: %v", typesOf(nw))
	run, _ = b.routeOf(t, tok)
	require.Equal(t, "o11", run, "writing the reset run moved no route: the history service does")
	to, err = b.e.DeliverHook(ctx, tok, []byte(`{"ok":true}`), "d-11")
	require.NoError(t, err, "a redelivery is a duplicate")
	require.Equal(t, newID, to)
	require.Equal(t, core.StatusCompleted, b.drive(t, newID))
	b.checkBoth(t, "o11", newID)

	// Two resets in a row, neither route moved: the delivery follows both.
	_, _, err = b.e.Start(ctx, engine.StartParams{RunID: "o12", Spec: event.Spec{Definition: "order"}, Input: []byte(`{"item":"pen","qty":2}`)})
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, b.drive(t, "o12"))
	b.signal(t, "o12", "s-12")
	require.Equal(t, core.StatusSuspended, b.drive(t, "o12"))
	tok12 := b.snapshot(t, "o12").Hooks["confirm"].Token
	first, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o12", Mode: event.ResetToSeq, Seq: 5})
	require.NoError(t, err)
	second, err := b.e.Reset(ctx, engine.ResetParams{RunID: first, Mode: event.ResetToSeq, Seq: 5})
	require.NoError(t, err)
	run, _ = b.routeOf(t, tok12)
	require.Equal(t, "o12", run)
	to, err = b.e.DeliverHook(ctx, tok12, []byte(`{"ok":true}`), "d-12")
	require.NoError(t, err)
	require.Equal(t, second, to, "the delivery reaches the run the chain goes on in")

	// A hook created after the reset point: the new run has no copy, and the delivery is
	// refused as the old run refuses it, before and after the new run creates its own hook.
	_, _, err = b.e.Start(ctx, engine.StartParams{RunID: "o13", Spec: event.Spec{Definition: "order"}, Input: []byte(`{"item":"ink","qty":3}`)})
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, b.drive(t, "o13"))
	tok13 := b.snapshot(t, "o13").Hooks["confirm"].Token
	before, err := b.e.Reset(ctx, engine.ResetParams{RunID: "o13", Mode: event.ResetToSeq, Seq: 3})
	require.NoError(t, err)
	to, err = b.e.DeliverHook(ctx, tok13, []byte(`{"ok":true}`), "d-13")
	require.ErrorIs(t, err, core.ErrTerminal)
	require.Equal(t, "o13", to)
	require.Equal(t, core.StatusSuspended, b.drive(t, before), "the new run creates the hook again, under its own token")
	require.NotEqual(t, tok13, b.snapshot(t, before).Hooks["confirm"].Token)
	_, err = b.e.DeliverHook(ctx, tok13, []byte(`{"ok":true}`), "d-13")
	require.ErrorIs(t, err, core.ErrTerminal)
	for _, e := range b.history(t, before) {
		require.NotEqual(t, event.TypeHookReceived, e.Type(), "the new run received nothing")
	}
}
