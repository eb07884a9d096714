package scheduler_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
)

// gated is a workflow under flow control opt that waits for signal "done", then completes with
// its input's n.
func gated(opt flow.WorkflowOption) *flow.Registry {
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: natstest.Logger()})
	flow.RegisterWorkflow(reg, "gated", func(ctx *flow.Context, in jobInput) (flow.Decision, error) {
		if ctx.Signal("done") == nil {
			return ctx.AwaitSignal("done", "done"), nil
		}
		return ctx.Complete(in.N), nil
	}, opt)
	return reg
}

// controlEnv is Flow with a worker of a registry, the history service and the ingress; the
// scheduler, which admits, is started by the test (scheduler).
type controlEnv struct {
	t      *testing.T
	ctx    context.Context
	client *flow.Client
	lims   *limits.Store
	h      *history.Service
	js     jetstream.JetStream
	// scheduler starts a scheduler with fault injector f.
	scheduler func(f *fault.Injector) *scheduler.Scheduler
}

func newControlEnv(t *testing.T, reg *flow.Registry, hf *fault.Injector) *controlEnv {
	t.Helper()
	return newControlEnvWith(t, reg, history.Config{Faults: hf})
}

// newControlEnvWith is newControlEnv with the history service's configuration hc (its
// connection, address, ack wait and logger are the environment's).
func newControlEnvWith(t *testing.T, reg *flow.Registry, hc history.Config) *controlEnv {
	t.Helper()
	srv := natstest.RunJetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	hc.Conn, hc.HTTPAddr, hc.AckWait, hc.Logger = natstest.Connect(t, srv), "off", time.Second, natstest.Logger()
	h, err := history.New(hc)
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { _ = h.Stop() })
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), Logger: natstest.Logger()})
	w := startWorker(t, natstest.Connect(t, srv), reg)
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	client, err := flow.NewClient(ctx, natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	lims, err := limits.Open(ctx, natstest.JetStream(t, srv))
	require.NoError(t, err)
	return &controlEnv{t: t, ctx: ctx, client: client, lims: lims, h: h, js: natstest.JetStream(t, srv), scheduler: func(f *fault.Injector) *scheduler.Scheduler {
		s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: natstest.Logger(), Faults: f})
		require.NoError(t, err)
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { _ = s.Stop() })
		return s
	}}
}

func (e *controlEnv) start(id, customer string, n int, opts *flow.StartOptions) {
	e.t.Helper()
	if opts == nil {
		opts = &flow.StartOptions{}
	}
	opts.RunID = id
	_, err := e.client.Start(e.ctx, "gated", jobInput{Customer: customer, N: n}, opts)
	require.NoError(e.t, err)
}

// status waits for run id to reach status want.
func (e *controlEnv) status(id string, want core.Status) *flow.Snapshot {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := e.client.Snapshot(e.ctx, id)
		if err == nil && s.Status == want {
			return s
		}
		if time.Now().After(deadline) {
			if err != nil {
				e.t.Fatalf("run %s never reached %s: %v", id, want, err)
			}
			e.t.Fatalf("run %s never reached %s: it is %s (blocked: %+v, outcome: %+v)", id, want, s.Status, s.Blocked, s.Outcome)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *controlEnv) done(id string) {
	e.t.Helper()
	_, err := e.client.Signal(e.ctx, id, "done", nil, nil)
	require.NoError(e.t, err)
	e.status(id, core.StatusCompleted)
}

// admittedAt returns when run id's run.admitted is recorded, and when it ended (zero if not).
func (e *controlEnv) admittedAt(id string) (admitted, ended time.Time) {
	e.t.Helper()
	hist, err := e.client.History(e.ctx, id, 0)
	require.NoError(e.t, err)
	for _, ev := range hist {
		if ev.Type() == event.TypeRunAdmitted {
			admitted = ev.Time
		}
		if ev.Type().Terminal() {
			ended = ev.Time
		}
	}
	return admitted, ended
}

// singletonContended starts "gated" with a singleton on its customer under policy, with a
// scheduler, and two runs of customer "a": a-1, once it holds the key (suspended), then a-2.
func singletonContended(t *testing.T, policy flow.Singleton) *controlEnv {
	t.Helper()
	e := newControlEnv(t, gated(flow.WithSingleton("$.customer", policy)), nil)
	e.scheduler(nil)
	e.start("a-1", "a", 1, nil)
	e.status("a-1", core.StatusSuspended)
	e.start("a-2", "a", 2, nil)
	return e
}

func TestSingletonSkip(t *testing.T) {
	t.Parallel()
	e := singletonContended(t, flow.SingletonSkip)
	s := e.status("a-2", core.StatusCancelled)
	require.Equal(t, event.CauseFlowControl, s.Outcome.Cause)
	require.Contains(t, s.Outcome.Reason, "cancel_newest")
	e.start("b-1", "b", 3, nil)
	e.status("b-1", core.StatusSuspended) // another key runs beside it
	e.done("a-1")
	// The slot frees once the history service has released it, after the terminal commit.
	require.Eventually(t, func() bool {
		st, _, err := e.lims.Load(e.ctx, "gated")
		_, held := st.Holders["a-1"]
		return err == nil && !held
	}, 10*time.Second, 5*time.Millisecond)
	e.start("a-3", "a", 4, nil)
	e.status("a-3", core.StatusSuspended)
}

func TestSingletonReplace(t *testing.T) {
	t.Parallel()
	e := singletonContended(t, flow.SingletonReplace)
	s := e.status("a-1", core.StatusCancelled)
	require.Equal(t, event.CauseFlowControl, s.Outcome.Cause)
	require.Contains(t, s.Outcome.Reason, `replaced by the newer run "a-2"`)
	e.status("a-2", core.StatusSuspended)
	_, ended := e.admittedAt("a-1")
	admitted, _ := e.admittedAt("a-2")
	require.False(t, admitted.Before(ended), "the new run is admitted after the replaced one ended")
}

// TestPriorityOrdersTheQueue: with one slot, the waiting runs are admitted highest priority
// first, then in the order they started. The order is among the runs the controller has seen
// queued (a queue entry follows its run's start through the history service, and the controller
// watches the queue and the runs' ends apart), so the test stops the first controller once
// "first" holds the slot and starts the next one when all three runs are in the queue: a
// controller loads the whole queue before its first round.
func TestPriorityOrdersTheQueue(t *testing.T) {
	t.Parallel()
	e := newControlEnv(t, gated(flow.WithFlowControl(flow.FlowControl{Concurrency: 1})), nil)
	first := e.scheduler(nil)
	e.start("first", "x", 0, nil)
	e.status("first", core.StatusSuspended)
	require.NoError(t, first.Stop())
	e.start("low-1", "x", 1, nil)
	e.start("low-2", "x", 2, nil)
	e.start("high", "x", 3, &flow.StartOptions{Priority: 5})
	s := e.status("high", core.StatusQueued)
	require.Equal(t, 5, s.Priority)
	require.Contains(t, s.QueuedReason(), "waiting for admission") // a queued run's summary detail
	queue, err := limits.OpenQueue(e.ctx, e.js)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		runs, err := queue.Runs(e.ctx)
		return err == nil && len(runs) == 3
	}, 10*time.Second, 5*time.Millisecond, "the three runs are in the admission queue")
	e.scheduler(nil)
	for _, next := range []string{"first", "high", "low-1", "low-2"} {
		e.status(next, core.StatusSuspended)
		for _, other := range []string{"high", "low-1", "low-2"} {
			if other != next {
				if s, err := e.client.Snapshot(e.ctx, other); err == nil && s.Status == core.StatusSuspended {
					t.Fatalf("run %s admitted while %s holds the only slot", other, next)
				}
			}
		}
		e.done(next)
	}
}

// TestAdmissionCompletesAReservation: a controller that died after taking a run's slot and rate
// token (FLOW_LIMITS written) and before appending its run.admitted leaves a reservation; the
// next leader completes it at the reserved time, and the slot counts meanwhile.
func TestAdmissionCompletesAReservation(t *testing.T) {
	t.Parallel()
	fc := flow.FlowControl{KeyPath: "$.customer", KeyConcurrency: 1}
	e := newControlEnv(t, gated(flow.WithFlowControl(fc)), nil)
	e.start("a-1", "a", 1, nil)
	e.start("a-2", "a", 2, nil)
	e.status("a-1", core.StatusQueued)
	e.status("a-2", core.StatusQueued)
	// What the dead controller wrote: a-2 reserved, nothing appended.
	reserved := time.Now().UTC()
	control := &event.FlowControl{Group: "gated", Key: "a", KeyPath: "$.customer", KeyConcurrency: 1, OnLimit: event.OnLimitQueue}
	require.NoError(t, e.lims.Update(e.ctx, "gated", func(st *limits.State) bool {
		return st.Take("a-2", control, reserved) == nil
	}))
	e.scheduler(nil)
	e.status("a-2", core.StatusSuspended)
	admitted, _ := e.admittedAt("a-2")
	require.True(t, admitted.Equal(reserved), "admitted at the reserved time %s, not %s", reserved, admitted)
	time.Sleep(100 * time.Millisecond) // a-1 must stay queued: the reserved slot is the key's only one
	require.Equal(t, core.StatusQueued, e.status("a-1", core.StatusQueued).Status)
	e.done("a-2")
	e.status("a-1", core.StatusSuspended)
}

// TestAdmissionFaultBetweenReserveAndAppend fails the controller between its FLOW_LIMITS write
// and the appends of run.admitted, again and again: each reservation is completed by a later
// round, no run is admitted twice and the per-key limit holds.
func TestAdmissionFaultBetweenReserveAndAppend(t *testing.T) {
	t.Parallel()
	fc := flow.FlowControl{KeyPath: "$.customer", KeyConcurrency: 1}
	e := newControlEnv(t, gated(flow.WithFlowControl(fc)), nil)
	f := &fault.Injector{}
	f.ArmEvery(fault.AdmitAfterReserve, fault.Fail, 2, 4)
	e.scheduler(f)
	ids := []string{"a-1", "a-2", "a-3", "b-1", "b-2"}
	for i, id := range ids {
		e.start(id, id[:1], i, nil)
	}
	// The runs of a key are admitted one at a time, in the order the controller learns of them:
	// end each as it is admitted.
	for left := len(ids); left > 0; {
		for _, id := range ids {
			s, err := e.client.Snapshot(e.ctx, id)
			if err == nil && s.Status == core.StatusSuspended {
				e.done(id)
				left--
			}
		}
		require.NoError(t, e.ctx.Err())
		time.Sleep(5 * time.Millisecond)
	}
	require.Positive(t, f.Hits(fault.AdmitAfterReserve))
	var spans [][2]time.Time
	for _, id := range ids[:3] {
		a, end := e.admittedAt(id)
		spans = append(spans, [2]time.Time{a, end})
	}
	slices.SortFunc(spans, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	for i := 1; i < len(spans); i++ {
		require.False(t, spans[i][0].Before(spans[i-1][1]), "key a's runs never overlap: %v", spans)
	}
}

// heldWithoutLeader starts gated runs of key "a" under a concurrency of 1: a-1 holds the slot,
// a-2 waits for it, and the admission controller that admitted a-1 has stopped.
func heldWithoutLeader(t *testing.T) *controlEnv {
	t.Helper()
	fc := flow.FlowControl{KeyPath: "$.customer", KeyConcurrency: 1}
	e := newControlEnv(t, gated(flow.WithFlowControl(fc)), nil)
	first := e.scheduler(nil)
	e.start("a-1", "a", 1, nil)
	e.status("a-1", core.StatusSuspended)
	e.start("a-2", "a", 2, nil)
	require.NoError(t, first.Stop())
	return e
}

// TestSlotOfRunEndedWithoutControllerIsReleased: a run ends while no admission controller leads;
// the next leader finds its slot held by an ended run, releases it (a repair, counted), and the
// next run of the key is admitted.
func TestSlotOfRunEndedWithoutControllerIsReleased(t *testing.T) {
	t.Parallel()
	e := heldWithoutLeader(t)
	e.done("a-1")
	st, _, err := e.lims.Load(e.ctx, "gated")
	require.NoError(t, err)
	require.Contains(t, st.Holders, "a-1", "no controller released it")
	repairs := metrics.Repairs(metrics.StateSlots)
	e.scheduler(nil)
	e.status("a-2", core.StatusSuspended)
	st, _, err = e.lims.Load(e.ctx, "gated")
	require.NoError(t, err)
	require.NotContains(t, st.Holders, "a-1")
	require.Greater(t, metrics.Repairs(metrics.StateSlots), repairs, "the release is counted as a repair")
}

// A redelivered first commit of a run that ended never brings it back into the admission queue,
// and its slot never leaks (issue 19, finding 2): the ack of a-1's run.started is lost, so the
// history service applies it again after a-1 was admitted and ended, when its cache no longer
// holds the run. The queue entry stays deleted, a-1 holds no slot, and the key's next run is
// admitted.
func TestRedeliveredStartOfEndedRun(t *testing.T) {
	t.Parallel()
	hf := &fault.Injector{}
	hf.Arm(fault.HistoryBeforeAck, fault.Fail, 0, 1) // a-1's run.started, the first commit applied
	fc := flow.FlowControl{KeyPath: "$.customer", KeyConcurrency: 1}
	e := newControlEnv(t, gated(flow.WithFlowControl(fc)), hf)
	e.scheduler(nil)
	e.start("a-1", "a", 1, nil)
	e.status("a-1", core.StatusSuspended)
	e.done("a-1")
	// Every commit of a-1 applied, then its first commit again, after AckWait.
	st, err := e.js.Stream(e.ctx, streams.History)
	require.NoError(t, err)
	info, err := st.Info(e.ctx, jetstream.WithSubjectFilter(streams.Layout{}.Subject("a-1")))
	require.NoError(t, err)
	commits := int64(info.State.Subjects[streams.Layout{}.Subject("a-1")])
	require.NoError(t, e.h.WaitApplied(e.ctx, commits+1), "the lost ack's commit is applied again")
	require.Equal(t, 1, hf.Hits(fault.HistoryBeforeAck)-int(commits), "the redelivery was acknowledged")
	e.start("a-2", "a", 2, nil)
	e.status("a-2", core.StatusSuspended)
	queue, err := e.js.KeyValue(e.ctx, streams.QueueBucket)
	require.NoError(t, err)
	_, err = queue.Get(e.ctx, "a-1")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the ended run is not queued again")
	lim, _, err := e.lims.Load(e.ctx, "gated")
	require.NoError(t, err)
	require.NotContains(t, lim.Holders, "a-1")
	require.Contains(t, lim.Holders, "a-2")
}

// TestRepairReleasesAnEndedRunsSlot: a slot still held by a run that ended (its release lost) is
// released by the admission controller when it takes over, and the queue moves on.
func TestRepairReleasesAnEndedRunsSlot(t *testing.T) {
	t.Parallel()
	fc := flow.FlowControl{Concurrency: 1}
	e := newControlEnv(t, gated(flow.WithFlowControl(fc)), nil)
	e.start("old", "x", 0, &flow.StartOptions{})
	_, err := e.client.Cancel(e.ctx, "old", "not needed")
	require.NoError(t, err)
	e.status("old", core.StatusCancelled)
	e.start("next", "x", 1, nil)
	require.NoError(t, e.lims.Update(e.ctx, "gated", func(st *limits.State) bool {
		return st.Take("old", &event.FlowControl{Group: "gated", Concurrency: 1}, time.Now().UTC()) == nil
	}))
	e.scheduler(nil)
	e.status("next", core.StatusSuspended)
	st, _, err := e.lims.Load(e.ctx, "gated")
	require.NoError(t, err)
	require.NotContains(t, st.Holders, "old")
}

func TestStartRefusesAMissingKey(t *testing.T) {
	t.Parallel()
	e := newControlEnv(t, gated(flow.WithFlowControl(flow.FlowControl{KeyPath: "$.customer", KeyConcurrency: 1})), nil)
	_, err := e.client.Start(e.ctx, "gated", map[string]int{"n": 1}, nil)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "no field at $.customer"), "%v", err)
	// A start may give the key itself.
	e.start("k", "", 1, &flow.StartOptions{ControlKey: "vip"})
	s := e.status("k", core.StatusQueued)
	require.Equal(t, "vip", s.Control.Key)
}

// TestPlainStartCarriesPriorityAndControl: a plain JSON start (api.StartRequest) sets the
// priority and the key, and a bad priority extension is refused.
func TestPlainStartCarriesPriorityAndControl(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: natstest.Logger()})
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { _ = h.Stop() })
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), Logger: natstest.Logger()})
	w := startWorker(t, natstest.Connect(t, srv), gated(flow.WithFlowControl(flow.FlowControl{KeyPath: "$.customer", KeyConcurrency: 1})))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	nc := natstest.Connect(t, srv)
	reply, err := nc.RequestWithContext(ctx, api.StartSubject("gated"),
		[]byte(`{"run_id":"plain-1","priority":7,"control_key":"vip","input":{"customer":"c-1","n":1}}`))
	require.NoError(t, err)
	require.Empty(t, reply.Header.Get(api.HeaderErrorCode), "%s", reply.Data)
	client, err := flow.NewClient(ctx, natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	s, err := client.Snapshot(ctx, "plain-1")
	require.NoError(t, err)
	require.Equal(t, 7, s.Priority)
	require.Equal(t, "vip", s.Control.Key)
	require.Equal(t, core.StatusQueued, s.Status)

	reply, err = nc.RequestWithContext(ctx, api.StartSubject("gated"), []byte(`{"run_id":"plain-2","input":{"n":1}}`))
	require.NoError(t, err)
	require.Equal(t, string(api.CodeInvalidRequest), reply.Header.Get(api.HeaderErrorCode))
	require.Contains(t, string(reply.Data), "no field at $.customer")
}

// TestDelayedStartIsAdmittedAfterItsDelay: a start delay comes first, admission second.
func TestDelayedStartIsAdmittedAfterItsDelay(t *testing.T) {
	t.Parallel()
	e := newControlEnv(t, gated(flow.WithFlowControl(flow.FlowControl{Concurrency: 1})), nil)
	e.scheduler(nil)
	e.start("later", "x", 1, &flow.StartOptions{Delay: 300 * time.Millisecond})
	e.status("later", core.StatusSuspended)
	hist, err := e.client.History(e.ctx, "later", 0)
	require.NoError(t, err)
	var fired, admitted uint64
	require.Eventually(t, func() bool {
		hist, err = e.client.History(e.ctx, "later", 0)
		if err != nil {
			return false
		}
		for _, ev := range hist {
			switch ev.Type() {
			case event.TypeRunDelayFired:
				fired = ev.Seq
			case event.TypeRunAdmitted:
				admitted = ev.Seq
			}
		}
		return admitted > 0
	}, 20*time.Second, 10*time.Millisecond, "the delayed run is admitted")
	require.Positive(t, fired)
	require.Greater(t, admitted, fired, "admitted after its delay fired")
	e.done("later")
}

// A run whose history is quarantined keeps its slot when a new admission leader checks the
// holders: released, the key's next run would be admitted beside it once an operator accepts
// the damage and it goes on. The slot goes when the run ends.
func TestDamagedHolderKeepsItsSlotUntilItEnds(t *testing.T) {
	t.Parallel()
	e := heldWithoutLeader(t)
	damaged, err := e.js.KeyValue(e.ctx, streams.DamagedBucket)
	require.NoError(t, err)
	mark, err := json.Marshal(jsstore.Damaged{RunID: "a-1", Reason: "test", DetectedAt: time.Now().UTC()})
	require.NoError(t, err)
	_, err = damaged.Put(e.ctx, "a-1", mark)
	require.NoError(t, err)

	// The new leader's first round checks every holder before it admits b-1.
	e.scheduler(nil)
	e.start("b-1", "b", 3, nil)
	e.status("b-1", core.StatusSuspended)
	st, _, err := e.lims.Load(e.ctx, "gated")
	require.NoError(t, err)
	require.Contains(t, st.Holders, "a-1", "the quarantined run keeps its slot")
	require.NotContains(t, st.Holders, "a-2", "no second run of key a is admitted")

	// Released and ended, it gives the slot to a-2.
	require.NoError(t, damaged.Delete(e.ctx, "a-1"))
	_, err = e.client.Terminate(e.ctx, "a-1", "released")
	require.NoError(t, err)
	e.status("a-2", core.StatusSuspended)
}
