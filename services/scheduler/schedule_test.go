package scheduler_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/scheduler"
)

// scheduleEnv is a real engine on embedded NATS: the history service, a worker running "tick"
// (it completes at once) and the FLOW_SCHEDULES bucket; schedulers are started by the test.
type scheduleEnv struct {
	t   *testing.T
	ctx context.Context
	srv *natsserver.Server
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	// history is the history service (its retention sweeper runs as its Config says).
	history *history.Service
}

func newScheduleEnv(t *testing.T) *scheduleEnv {
	t.Helper()
	return newScheduleEnvWith(t, history.Config{})
}

// newScheduleEnvWith is newScheduleEnv with the history service configured by hcfg (its
// connection, HTTP address and logger are set here); env.history is that service.
func newScheduleEnvWith(t *testing.T, hcfg history.Config) *scheduleEnv {
	t.Helper()
	srv := natstest.RunJetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	t.Cleanup(cancel)
	hcfg.Conn, hcfg.HTTPAddr, hcfg.Logger = natstest.Connect(t, srv), "off", natstest.Logger()
	h, err := history.New(hcfg)
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { _ = h.Stop() })
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: natstest.Logger()})
	flow.RegisterWorkflow(reg, "tick", func(ctx *flow.Context, in json.RawMessage) (flow.Decision, error) {
		return ctx.Complete(in), nil
	})
	// hold waits for a signal that never comes: its runs are active until cancelled or
	// terminated.
	flow.RegisterWorkflow(reg, "hold", func(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
		return ctx.AwaitSignal("go", "go"), nil
	})
	// gate waits for signal "go", then completes.
	flow.RegisterWorkflow(reg, "gate", gate)
	// chain waits for signal "next" and continues as new (generation 1), which runs as gate.
	flow.RegisterWorkflow(reg, "chain", func(ctx *flow.Context, in json.RawMessage) (flow.Decision, error) {
		if string(in) == `"gen1"` {
			return gate(ctx, in)
		}
		if ctx.Signal("next") != nil {
			return ctx.ContinueAsNew("gen1"), nil
		}
		return ctx.AwaitSignal("next", "next"), nil
	})
	w := startWorker(t, natstest.Connect(t, srv), reg)
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	js := natstest.JetStream(t, srv)
	kv, err := js.KeyValue(ctx, streams.SchedulesBucket)
	require.NoError(t, err)
	return &scheduleEnv{t: t, ctx: ctx, srv: srv, js: js, kv: kv, history: h}
}

func gate(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
	if ctx.Signal("go") != nil {
		return ctx.Complete("done"), nil
	}
	return ctx.AwaitSignal("go", "go"), nil
}

// scheduler starts a scheduler; poll is also how long it waits to repeat a failed round.
func (e *scheduleEnv) scheduler(name string, f *fault.Injector, poll time.Duration) *scheduler.Scheduler {
	e.t.Helper()
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(e.t, e.srv), Name: name, Logger: natstest.Logger(), Faults: f,
		SchedulePoll: poll, NoAdmission: true})
	require.NoError(e.t, err)
	require.NoError(e.t, s.Start(e.ctx))
	e.t.Cleanup(func() { _ = s.Stop() })
	return s
}

func (e *scheduleEnv) create(s schedule.Schedule) {
	e.t.Helper()
	sch, _, err := schedule.New(s, time.Now())
	require.NoError(e.t, err)
	data, err := json.Marshal(sch)
	require.NoError(e.t, err)
	_, err = e.kv.Create(e.ctx, s.Name, data)
	require.NoError(e.t, err)
}

func (e *scheduleEnv) get(name string) *schedule.Schedule {
	e.t.Helper()
	entry, err := e.kv.Get(e.ctx, name)
	require.NoError(e.t, err)
	var s schedule.Schedule
	require.NoError(e.t, json.Unmarshal(entry.Value(), &s))
	return &s
}

// TestScheduleKilledAtSlot is the real-engine test of issue 11's schedules: a schedule fires
// every second (allow_all, so that every slot starts a run); a first scheduler fails its round
// after starting the slot's run and before storing the schedule's state (fault
// schedule-after-start-before-state) and is stopped there, before it repeats the round, as if
// killed; a second one fails before starting anything (schedule-before-start) and is stopped
// the same way; a third one, without faults, takes over and catches up. Read straight from the history stream, every slot from the first
// to the last has exactly one run, started with run.started.schedule naming the schedule and
// the slot, and the stored state records each slot once, as started.
func TestScheduleKilledAtSlot(t *testing.T) {
	e := newScheduleEnv(t)
	e.create(schedule.Schedule{Name: "tick", Definition: "tick", Input: json.RawMessage(`{"n":1}`),
		Spec: schedule.Spec{Every: event.Duration(time.Second)}, Overlap: schedule.AllowAll})

	afterStart := &fault.Injector{}
	afterStart.Arm(fault.ScheduleAfterStartBeforeState, fault.Fail, 0, 0)
	// A failed round is repeated after the poll interval: long enough here to stop it first.
	s1 := e.scheduler("s1", afterStart, time.Minute)
	require.Eventually(t, func() bool { return afterStart.Hits(fault.ScheduleAfterStartBeforeState) >= 1 }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, s1.Stop())
	// Its runs started; the schedule's state does not know of them.
	require.Zero(t, e.get("tick").State.Started)

	beforeStart := &fault.Injector{}
	beforeStart.Arm(fault.ScheduleBeforeStart, fault.Fail, 0, 0)
	// This one repeats its failing round every 100ms: it starts nothing for two slots or more.
	s2 := e.scheduler("s2", beforeStart, 100*time.Millisecond)
	require.Eventually(t, func() bool { return beforeStart.Hits(fault.ScheduleBeforeStart) >= 15 }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, s2.Stop())
	// It found the run s1 started (a round with nothing to start stores the state): at most
	// that one is recorded.
	require.LessOrEqual(t, e.get("tick").State.Started, int64(1))

	s3 := e.scheduler("s3", nil, 100*time.Millisecond)
	require.Eventually(t, func() bool { return s3.FiringSchedules() }, 10*time.Second, 10*time.Millisecond)
	var stored *schedule.Schedule
	require.Eventually(t, func() bool {
		stored = e.get("tick")
		return stored.State.Started >= 5
	}, 20*time.Second, 50*time.Millisecond)
	require.NoError(t, s3.Stop())
	stored = e.get("tick")

	// Every run of the schedule, from the history stream: one per slot, none missing.
	bySlot := map[time.Time][]string{}
	for runID, envs := range readAllHistories(t, e.ctx, e.js) {
		started, ok := envs[0].Payload.(*event.RunStarted)
		require.True(t, ok, "run %s begins with %s", runID, envs[0].Type())
		require.Equal(t, 1, countType(envs, event.TypeRunStarted), "run %s", runID)
		if started.Schedule == nil {
			continue
		}
		require.Equal(t, "tick", started.Schedule.Name)
		require.Equal(t, event.ScheduleScheduled, started.Schedule.Action)
		require.Equal(t, schedule.RunID("tick", event.ScheduleScheduled, started.Schedule.Slot, ""), runID)
		bySlot[started.Schedule.Slot] = append(bySlot[started.Schedule.Slot], runID)
	}
	require.NotEmpty(t, bySlot)
	first, last := time.Time{}, time.Time{}
	for slot, runs := range bySlot {
		require.Len(t, runs, 1, "slot %s", slot)
		if first.IsZero() || slot.Before(first) {
			first = slot
		}
		if slot.After(last) {
			last = slot
		}
	}
	for slot := first; !slot.After(last); slot = slot.Add(time.Second) {
		require.Len(t, bySlot[slot], 1, "slot %s has no run", slot)
	}
	require.Equal(t, int64(len(bySlot)), stored.State.Started, "the state counts every started slot once")
	seen := map[time.Time]bool{}
	for _, a := range stored.State.Recent {
		require.Equal(t, schedule.Started, a.Outcome, "%+v", a)
		require.False(t, seen[a.Slot], "slot %s recorded twice", a.Slot)
		seen[a.Slot] = true
	}
	t.Logf("%d slots, %d..%d; faults hit: after start %d, before start %d", len(bySlot), first.Unix(), last.Unix(),
		afterStart.Hits(fault.ScheduleAfterStartBeforeState), beforeStart.Hits(fault.ScheduleBeforeStart))
}

func countType(envs []event.Envelope, typ event.Type) int {
	n := 0
	for _, e := range envs {
		if e.Type() == typ {
			n++
		}
	}
	return n
}

// TestScheduleOverlapOnEngine runs terminate_other and cancel_other on the real engine, with
// runs that never end by themselves: each new slot's run of the terminate_other schedule starts
// after the run before it was terminated (run.failed, cause operator), and each of the
// cancel_other schedule after the run before it was cancelled (run.cancel_requested, then
// run.cancelled). It logs how late after its slot each terminate_other run started.
func TestScheduleOverlapOnEngine(t *testing.T) {
	e := newScheduleEnv(t)
	every := schedule.Spec{Every: event.Duration(time.Second)}
	e.create(schedule.Schedule{Name: "term", Definition: "hold", Spec: every, Overlap: schedule.TerminateOther})
	e.create(schedule.Schedule{Name: "canc", Definition: "hold", Spec: every, Overlap: schedule.CancelOther})
	s := e.scheduler("s1", nil, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		return e.get("term").State.Started >= 4 && e.get("canc").State.Started >= 3
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, s.Stop())

	type run struct {
		id           string
		slot         time.Time
		started, end time.Time
		ended        event.Payload
		cancelAsked  bool
	}
	runs := map[string][]run{}
	for id, envs := range readAllHistories(t, e.ctx, e.js) {
		st := envs[0].Payload.(*event.RunStarted)
		if st.Schedule == nil {
			continue
		}
		r := run{id: id, slot: st.Schedule.Slot, started: envs[0].Time}
		for _, env := range envs[1:] {
			switch env.Payload.(type) {
			case *event.RunCancelRequested:
				r.cancelAsked = true
			case *event.RunFailed, *event.RunCancelled, *event.RunCompleted:
				r.ended, r.end = env.Payload, env.Time
			}
		}
		runs[st.Schedule.Name] = append(runs[st.Schedule.Name], r)
	}
	var lateness []time.Duration
	for name, list := range runs {
		slices.SortFunc(list, func(a, b run) int { return a.slot.Compare(b.slot) })
		for i, r := range list[:len(list)-1] {
			next := list[i+1]
			require.NotNil(t, r.ended, "%s: run %s did not end before %s started", name, r.id, next.id)
			require.False(t, next.started.Before(r.end), "%s: run %s started before %s ended", name, next.id, r.id)
			switch name {
			case "term":
				f, ok := r.ended.(*event.RunFailed)
				require.True(t, ok, "run %s ended with %T", r.id, r.ended)
				require.Equal(t, event.CauseOperator, f.Cause)
				require.Contains(t, f.Error.Message, "terminate_other")
			case "canc":
				require.True(t, r.cancelAsked, "run %s", r.id)
				require.IsType(t, &event.RunCancelled{}, r.ended, "run %s", r.id)
			}
		}
		if name == "term" {
			for _, r := range list {
				lateness = append(lateness, r.started.Sub(r.slot))
			}
		}
	}
	require.GreaterOrEqual(t, len(runs["term"]), 4)
	require.GreaterOrEqual(t, len(runs["canc"]), 3)
	slices.Sort(lateness)
	t.Logf("terminate_other: %d runs, start after slot p50 %s, max %s; cancel_other: %d runs", len(runs["term"]),
		lateness[len(lateness)/2], lateness[len(lateness)-1], len(runs["canc"]))
}
