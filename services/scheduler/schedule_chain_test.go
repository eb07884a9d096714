package scheduler_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
)

// yearly is a spec whose next slot is months away: the tests act through triggers only.
var yearly = schedule.Spec{Cron: "0 0 1 1 *"}

// stateWait bounds how long a test waits for the scheduler to act (generous: the suites run
// under load).
const stateWait = 30 * time.Second

// trigger asks schedule name for an action at now, as the schedule runner's door does
// (compare-and-set of its entry), with request IDs ids, all at the same instant.
func (e *scheduleEnv) trigger(name string, overlap schedule.Overlap, now time.Time, ids ...string) {
	e.t.Helper()
	for range 100 {
		entry, err := e.kv.Get(e.ctx, name)
		require.NoError(e.t, err)
		var s schedule.Schedule
		require.NoError(e.t, json.Unmarshal(entry.Value(), &s))
		for _, id := range ids {
			ok, err := s.Trigger(id, overlap, now)
			require.NoError(e.t, err)
			require.True(e.t, ok, "trigger %s", id)
		}
		data, err := json.Marshal(&s)
		require.NoError(e.t, err)
		if _, err := e.kv.Update(e.ctx, name, data, entry.Revision()); err == nil {
			return
		}
	}
	e.t.Fatalf("schedule %s kept changing under 100 triggers", name)
}

// waitState waits until schedule name's stored state satisfies ok, and returns it.
func (e *scheduleEnv) waitState(name, what string, ok func(*schedule.State) bool) *schedule.State {
	e.t.Helper()
	var st *schedule.State
	deadline := time.Now().Add(stateWait)
	for {
		st = &e.get(name).State
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("schedule %s: %s: not within %s; state: running %v, buffered %v, started %d, skipped %d, recent %+v",
				name, what, stateWait, st.Running, st.Buffered, st.Started, st.Skipped, st.Recent)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// last returns the latest recorded action of st.
func last(st *schedule.State) schedule.Action { return st.Recent[len(st.Recent)-1] }

// runHistory reads run runID's history straight from the history stream.
func (e *scheduleEnv) runHistory(runID string) []event.Envelope {
	e.t.Helper()
	var out []event.Envelope
	for id, envs := range readAllHistories(e.t, e.ctx, e.js) {
		if id == runID {
			out = envs
		}
	}
	return out
}

// waitEvent waits until run runID's history holds an event of type typ.
func (e *scheduleEnv) waitEvent(runID string, typ event.Type) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		return slices.ContainsFunc(e.runHistory(runID), func(env event.Envelope) bool { return env.Type() == typ })
	}, stateWait, 50*time.Millisecond, "run %s records no %s", runID, typ)
}

// sweepUntilDeleted runs retention sweeps until run runID is deleted (its index entry must
// first show that it ended).
func (e *scheduleEnv) sweepUntilDeleted(runID string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		rep, err := e.history.Sweep(e.ctx)
		require.NoError(e.t, err)
		return slices.Contains(rep.Deleted, runID)
	}, stateWait, 50*time.Millisecond, "run %s is not deleted", runID)
}

// scheduleRuns returns the IDs of the runs that schedule name started (run.started.schedule),
// read from the history stream, sorted.
func (e *scheduleEnv) scheduleRuns(name string) []string {
	e.t.Helper()
	var out []string
	for id, envs := range readAllHistories(e.t, e.ctx, e.js) {
		if st, ok := envs[0].Payload.(*event.RunStarted); ok && st.Schedule != nil && st.Schedule.Name == name && st.ResetFrom == nil {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// chainEnv is a schedule environment whose history service deletes every ended run at the
// test's sweep, with an ingress and a client to signal and reset runs.
func chainEnv(t *testing.T) (*scheduleEnv, *flow.Client) {
	t.Helper()
	// Every ended run is past its retention period at once; the test sweeps by itself.
	e := newScheduleEnvWith(t, history.Config{Retention: time.Nanosecond, RetentionSweep: -1})
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, e.srv), Logger: natstest.Logger()})
	client, err := flow.NewClient(e.ctx, natstest.Connect(t, e.srv), nil)
	require.NoError(t, err)
	return e, client
}

// TestScheduleSkipFollowsContinuedRunPastDeletion: the run a schedule (skip) started continues
// as new while the scheduler is down, and retention deletes that first run of the chain. A
// trigger afterwards is skipped while the chain's current run is active; once that run ends,
// the schedule sees it and the next trigger starts a run.
func TestScheduleSkipFollowsContinuedRunPastDeletion(t *testing.T) {
	e, client := chainEnv(t)
	ctx := e.ctx
	e.create(schedule.Schedule{Name: "cont", Definition: "chain", Spec: yearly})
	s1 := e.scheduler("s1", nil, 50*time.Millisecond)
	e.trigger("cont", "", time.Now(), "c1")
	first := last(e.waitState("cont", "the first trigger starts a run", func(st *schedule.State) bool { return st.Started == 1 })).RunID
	require.NoError(t, s1.Stop())
	_, err := client.Signal(ctx, first, "next", nil, nil)
	require.NoError(t, err)
	successor := event.SuccessorRunID(first, 1)
	e.waitEvent(successor, event.TypeSignalAwaited)
	e.sweepUntilDeleted(first)

	e.scheduler("s2", nil, 50*time.Millisecond)
	e.trigger("cont", "", time.Now(), "c2")
	st := e.waitState("cont", "the second trigger is dealt with", func(st *schedule.State) bool { return len(st.Recent) == 2 })
	require.Equal(t, schedule.Skipped, last(st).Outcome, "run %s continues as %s, which is active: %+v", first, successor, last(st))
	require.Equal(t, int64(1), st.Started)
	// The first run's history is deleted: a second chain would be the only run of the schedule.
	require.Empty(t, e.scheduleRuns("cont"), "a second chain started")

	_, err = client.Signal(ctx, successor, "go", nil, nil)
	require.NoError(t, err)
	e.waitState("cont", "the chain's end is seen", func(st *schedule.State) bool { return len(st.Running) == 0 })
	e.trigger("cont", "", time.Now(), "c3")
	st = e.waitState("cont", "the third trigger is dealt with", func(st *schedule.State) bool { return len(st.Recent) == 3 })
	require.Equal(t, schedule.Started, last(st).Outcome, "%+v", last(st))
}

// TestScheduleSkipFollowsResetRun: the run a schedule (skip) started is reset, which ends it
// and goes on in the reset run. Triggers are skipped while the reset run is active, also once
// retention deleted the old run; terminate_other terminates the reset run, not the deleted one.
func TestScheduleSkipFollowsResetRun(t *testing.T) {
	e, client := chainEnv(t)
	ctx := e.ctx
	e.create(schedule.Schedule{Name: "reset", Definition: "gate", Spec: yearly})
	e.scheduler("s1", nil, 50*time.Millisecond)
	e.trigger("reset", "", time.Now(), "r1")
	old := last(e.waitState("reset", "the first trigger starts a run", func(st *schedule.State) bool { return st.Started == 1 })).RunID
	e.waitEvent(old, event.TypeSignalAwaited)
	res, err := client.Reset(ctx, old, &flow.ResetOptions{Seq: 1, Reason: "test"})
	require.NoError(t, err)
	e.waitEvent(old, event.TypeRunReset)
	e.waitEvent(res.NewRunID, event.TypeSignalAwaited)

	e.trigger("reset", "", time.Now(), "r2")
	st := e.waitState("reset", "the second trigger is dealt with", func(st *schedule.State) bool { return len(st.Recent) == 2 })
	require.Equal(t, schedule.Skipped, last(st).Outcome, "run %s was reset as %s, which is active: %+v", old, res.NewRunID, last(st))

	e.sweepUntilDeleted(old)
	e.trigger("reset", "", time.Now(), "r3")
	st = e.waitState("reset", "the third trigger is dealt with", func(st *schedule.State) bool { return len(st.Recent) == 3 })
	require.Equal(t, schedule.Skipped, last(st).Outcome, "run %s (deleted) was reset as %s, which is active: %+v", old, res.NewRunID, last(st))
	require.Equal(t, int64(1), st.Started)

	e.trigger("reset", schedule.TerminateOther, time.Now(), "r4")
	st = e.waitState("reset", "the fourth trigger is dealt with", func(st *schedule.State) bool { return len(st.Recent) == 4 })
	require.Equal(t, schedule.Started, last(st).Outcome, "%+v", last(st))
	e.waitEvent(res.NewRunID, event.TypeRunFailed)
	hist := e.runHistory(res.NewRunID)
	failed, ok := hist[len(hist)-1].Payload.(*event.RunFailed)
	require.True(t, ok, "%T", hist[len(hist)-1].Payload)
	require.Contains(t, failed.Error.Message, "terminate_other")
}

// TestScheduleRerunOfEndedRunIsNotCounted: a rerun of a scheduled run that had ended revives
// nothing of the schedule's chain, whether or not the schedule saw the end before the rerun
// (here it did not: the scheduler was down): a trigger under skip starts a run, and the
// rerun's run never enters the running list. Found by the torture test (O3): which of the two
// a round saw depended on when it read.
func TestScheduleRerunOfEndedRunIsNotCounted(t *testing.T) {
	e, client := chainEnv(t)
	ctx := e.ctx
	e.create(schedule.Schedule{Name: "rerun", Definition: "gate", Spec: yearly})
	s1 := e.scheduler("s1", nil, 50*time.Millisecond)
	e.trigger("rerun", "", time.Now(), "r1")
	old := last(e.waitState("rerun", "the first trigger starts a run", func(st *schedule.State) bool { return st.Started == 1 })).RunID
	e.waitEvent(old, event.TypeSignalAwaited)
	require.NoError(t, s1.Stop())
	_, err := client.Signal(ctx, old, "go", nil, nil)
	require.NoError(t, err)
	e.waitEvent(old, event.TypeRunCompleted)
	res, err := client.Reset(ctx, old, &flow.ResetOptions{Seq: 1, DropInputs: true, Reason: "test"})
	require.NoError(t, err)
	e.waitEvent(res.NewRunID, event.TypeSignalAwaited)
	require.Equal(t, event.TypeSignalAwaited, e.runHistory(res.NewRunID)[1].Type(), "the rerun waits for its signal")
	require.Equal(t, []string{old}, e.get("rerun").State.Running, "the scheduler, down, has not seen the run end")

	e.scheduler("s2", nil, 50*time.Millisecond)
	e.trigger("rerun", "", time.Now(), "r2")
	st := e.waitState("rerun", "the second trigger is dealt with", func(st *schedule.State) bool { return len(st.Recent) == 2 })
	require.Equal(t, schedule.Started, last(st).Outcome, "run %s ended before its rerun %s: %+v", old, res.NewRunID, last(st))
	require.Equal(t, []string{last(st).RunID}, st.Running)
	require.Empty(t, st.Current)
}

// TestScheduleRunningListSeesEnds: a schedule whose slots are months apart learns within
// seconds that its run ended: a run that completes at once leaves the running list (which
// `flow schedule describe` and the UI show) without waiting for the next slot.
func TestScheduleRunningListSeesEnds(t *testing.T) {
	e := newScheduleEnv(t)
	e.create(schedule.Schedule{Name: "tick", Definition: "tick", Spec: yearly})
	e.scheduler("s1", nil, 50*time.Millisecond)
	e.trigger("tick", "", time.Now(), "t1")
	run := last(e.waitState("tick", "the trigger starts a run", func(st *schedule.State) bool { return st.Started == 1 })).RunID
	e.waitEvent(run, event.TypeRunCompleted)
	e.waitState("tick", "the completed run leaves the running list", func(st *schedule.State) bool { return len(st.Running) == 0 })
}

// TestScheduleBufferedStartsWhenRunEnds: an action buffered behind a run (buffer_one) starts
// once that run ended, not at the schedule's next slot months later.
func TestScheduleBufferedStartsWhenRunEnds(t *testing.T) {
	e := newScheduleEnv(t)
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, e.srv), Logger: natstest.Logger()})
	client, err := flow.NewClient(e.ctx, natstest.Connect(t, e.srv), nil)
	require.NoError(t, err)
	e.create(schedule.Schedule{Name: "buf", Definition: "gate", Spec: yearly, Overlap: schedule.BufferOne})
	e.scheduler("s1", nil, 50*time.Millisecond)
	e.trigger("buf", "", time.Now(), "b1")
	first := last(e.waitState("buf", "the first trigger starts a run", func(st *schedule.State) bool { return st.Started == 1 })).RunID
	e.trigger("buf", "", time.Now(), "b2")
	e.waitState("buf", "the second trigger is buffered", func(st *schedule.State) bool { return len(st.Buffered) == 1 })
	_, err = client.Signal(e.ctx, first, "go", nil, nil)
	require.NoError(t, err)
	e.waitEvent(first, event.TypeRunCompleted)
	st := e.waitState("buf", "the buffered action starts once the run ended", func(st *schedule.State) bool {
		return st.Started == 2 && len(st.Buffered) == 0
	})
	require.NotContains(t, st.Running, first)
}

// TestScheduleTwoTriggersInOneMillisecond: two triggers asked for in the same millisecond are
// two actions, and become two runs (allow_all), as the schedule's counts say.
func TestScheduleTwoTriggersInOneMillisecond(t *testing.T) {
	e := newScheduleEnv(t)
	e.create(schedule.Schedule{Name: "tick", Definition: "tick", Spec: yearly, Overlap: schedule.AllowAll})
	e.scheduler("s1", nil, 50*time.Millisecond)
	e.trigger("tick", "", time.Now(), "a", "b")
	st := e.waitState("tick", "both triggers are dealt with", func(st *schedule.State) bool { return len(st.Recent) == 2 })
	require.Equal(t, int64(2), st.Started)
	require.NotEqual(t, st.Recent[0].RunID, st.Recent[1].RunID, "two triggers, one run ID")
	var runs []string
	require.Eventually(t, func() bool {
		runs = e.scheduleRuns("tick")
		return len(runs) >= 2
	}, stateWait, 50*time.Millisecond, "two triggers, runs %v", runs)
	require.Len(t, runs, 2)
}
