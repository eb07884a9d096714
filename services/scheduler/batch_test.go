package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/batch"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fanout"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/filter"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/scheduler"
)

// batchEnv is a NATS server with a history service (which keeps the runs index the jobs read),
// an engine to start runs with, and the batch store.
type batchEnv struct {
	t     *testing.T
	ctx   context.Context
	srv   *natsserver.Server
	js    jetstream.JetStream
	eng   *engine.Engine
	store *batch.Store
	runs  jetstream.KeyValue
	// history keeps the runs index; stopHistory stops it (the index stays in FLOW_RUNS).
	history *history.Service
}

// batchTTL is the lease TTL of the tests: a dead executor's lease expires after it. Long enough
// that a live executor on a loaded machine renews it in time (a third of it), short enough that
// the takeovers cost seconds.
var batchTTL = streams.Config{LeaseTTL: 3 * time.Second}

func newBatchEnv(t *testing.T) *batchEnv {
	t.Helper()
	srv := natstest.RunJetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	t.Cleanup(cancel)
	quiet := natstest.Logger()
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet, Streams: batchTTL})
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { _ = h.Stop() })
	js := natstest.JetStream(t, srv)
	st, err := jsstore.New(ctx, js, nil)
	require.NoError(t, err)
	host, err := jshost.New(ctx, js, "flow/test", quiet)
	require.NoError(t, err)
	host.AsyncTasks = true // the history service derives every resume task; no start waits for one
	eng, err := engine.New(engine.Config{Store: st, Host: host, Logger: quiet})
	require.NoError(t, err)
	store, err := batch.Open(ctx, js)
	require.NoError(t, err)
	runs, err := js.KeyValue(ctx, streams.RunsBucket)
	require.NoError(t, err)
	return &batchEnv{t: t, ctx: ctx, srv: srv, js: js, eng: eng, store: store, runs: runs, history: h}
}

// tierSchema declares the search attribute "tier" of definition "order".
var tierSchema = filter.NewSchema(streams.DefaultQueue, filter.Declared{Definition: "order",
	Attributes: []event.AttributeDecl{{Name: "tier", Type: event.AttrKeyword}}})

func tier(v string) event.Attributes {
	return event.Attributes{"tier": {Type: event.AttrKeyword, Value: json.RawMessage(`"` + v + `"`)}}
}

// start starts run id of definition "order" with tier t.
func (e *batchEnv) start(id, t string) error {
	_, _, err := e.eng.Start(e.ctx, engine.StartParams{RunID: id, Spec: event.Spec{Definition: "order"}, Input: []byte(`{}`), Attributes: tier(t)})
	return err
}

// indexed waits until the runs index holds n entries and run id shows status st.
func (e *batchEnv) indexed(n int, id string, st core.Status) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		s, err := e.runs.Status(e.ctx)
		if err != nil || s.Values() < uint64(n) {
			return false
		}
		ent, err := e.runs.Get(e.ctx, id)
		var sum core.Summary
		return err == nil && json.Unmarshal(ent.Value(), &sum) == nil && sum.Status == st
	}, 5*time.Minute, 10*time.Millisecond, "the runs index holds %d runs and %s is %s", n, id, st)
}

func (e *batchEnv) create(spec batch.Spec, id string) batch.Job {
	e.t.Helper()
	now := time.Now().UTC()
	j, created, err := e.store.Create(e.ctx, batch.Job{ID: id, Spec: spec, Schema: tierSchema, State: batch.StatePending, CreatedAt: now, UpdatedAt: now})
	require.NoError(e.t, err)
	require.True(e.t, created)
	return j
}

// executor starts a scheduler that executes batch jobs (and nothing else of interest) with
// faults f.
func (e *batchEnv) executor(name string, f *fault.Injector) *scheduler.Scheduler {
	e.t.Helper()
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(e.t, e.srv), Name: name, Streams: batchTTL, Logger: natstest.Logger(),
		Faults: f, NoAdmission: true, BatchOpConcurrency: 64})
	require.NoError(e.t, err)
	require.NoError(e.t, s.Start(e.ctx))
	e.t.Cleanup(func() { _ = s.Stop() })
	return s
}

func (e *batchEnv) job(id string) batch.Job {
	e.t.Helper()
	j, _, err := e.store.Get(e.ctx, id)
	require.NoError(e.t, err)
	return j
}

func (e *batchEnv) ended(id string) batch.Job {
	e.t.Helper()
	var j batch.Job
	require.Eventually(e.t, func() bool {
		j = e.job(id)
		return j.State.Ended()
	}, 5*time.Minute, 20*time.Millisecond, "job %s ends", id)
	return j
}

// TestBatchCancelFiveThousandRunsKilledTwice is the bulk-cancel test of issue 11: 5,000 runs,
// half of them (tier "gold") selected by the job's filter, ten of those ended before the job,
// and one gold run started after it. The job's executor dies twice: mid-window, after 700
// operations (a fault after an operation, before the cursor), then before the cursor of its
// fifth window; each time a new scheduler takes the batch lease once the dead one's expires.
// Read straight from the history stream, every gold run the job targets has exactly one
// run.cancel_requested, under the job's delivery ID; no other run has one; and the report
// counts 2,500 targets, 2,490 applied and 10 skipped "already failed".
func TestBatchCancelFiveThousandRunsKilledTwice(t *testing.T) {
	const runs = 5000
	e := newBatchEnv(t)
	t0 := time.Now()
	require.NoError(t, fanout.Each(e.ctx, 64, runs, func(i int) error {
		return e.start(fmt.Sprintf("order-%04d", i), map[bool]string{true: "gold", false: "silver"}[i%2 == 0])
	}))
	t.Logf("%d runs started in %s", runs, time.Since(t0).Round(time.Millisecond))
	for i := 0; i < 20; i += 2 {
		_, err := e.eng.Terminate(e.ctx, fmt.Sprintf("order-%04d", i), "ended before the job")
		require.NoError(t, err)
	}
	e.indexed(runs, "order-0018", core.StatusFailed)
	t.Logf("%d runs started and indexed in %s", runs, time.Since(t0).Round(time.Millisecond))

	e.create(batch.Spec{Op: batch.OpCancel, Where: `tier = "gold"`, Reason: "bad deploy", Rate: batch.MaxRate}, "cancel-gold")
	require.NoError(t, e.start("order-late", "gold"), "a run started after the job is never its target")
	e.indexed(runs+1, "order-late", core.StatusPending)
	// The job reads the runs index once, when it records its targets: the history service,
	// which would follow the cancellations too, is stopped to spare the two cores.
	require.NoError(t, e.history.Stop())

	t1 := time.Now()
	f1 := &fault.Injector{}
	f1.Arm(fault.BatchAfterOp, fault.Fail, 700, 1)
	s1 := e.executor("exec-1", f1)
	require.Eventually(t, func() bool { return f1.Hits(fault.BatchAfterOp) > 700 && !s1.Batching() }, time.Minute, 5*time.Millisecond)
	first := e.job("cancel-gold")
	require.Equal(t, batch.StateRunning, first.State)
	require.Equal(t, 2500, first.Total)
	require.Less(t, first.Cursor, 701, "the window the executor died in is not counted")

	f2 := &fault.Injector{}
	f2.Arm(fault.BatchBeforeCursor, fault.Fail, 4, 1)
	s2 := e.executor("exec-2", f2)
	require.Eventually(t, func() bool { return f2.Hits(fault.BatchBeforeCursor) > 4 && !s2.Batching() }, time.Minute, 5*time.Millisecond)
	second := e.job("cancel-gold")
	require.Equal(t, "exec-2", second.Executor)
	require.Greater(t, second.Cursor, first.Cursor, "four windows counted, the fifth applied but not counted")

	e.executor("exec-3", nil)
	j := e.ended("cancel-gold")
	t.Logf("job done in %s with two executor deaths (first at cursor %d, second at %d)", time.Since(t1).Round(time.Millisecond), first.Cursor, second.Cursor)
	require.Equal(t, batch.StateCompleted, j.State)
	require.Equal(t, "exec-3", j.Executor)
	require.Equal(t, 2500, j.Total)
	require.Equal(t, 2500, j.Cursor)
	require.Equal(t, 2490, j.Applied)
	require.Equal(t, map[string]int{"already failed": 10}, j.Skipped)
	require.Zero(t, j.Failed)
	require.Len(t, j.Skips, 10)

	hist := readAllHistories(t, e.ctx, e.js)
	require.Len(t, hist, runs+1)
	for id, envs := range hist {
		var cancels []*event.RunCancelRequested
		for _, env := range envs {
			if c, ok := env.Payload.(*event.RunCancelRequested); ok {
				cancels = append(cancels, c)
			}
		}
		var i int
		_, _ = fmt.Sscanf(id, "order-%04d", &i)
		target := id != "order-late" && i%2 == 0 && i >= 20
		if !target {
			require.Empty(t, cancels, "run %s is not the job's target", id)
			continue
		}
		require.Len(t, cancels, 1, "run %s is cancelled once", id)
		require.Equal(t, batch.DeliveryID("cancel-gold", id), cancels[0].DeliveryID)
		require.Equal(t, "bad deploy", cancels[0].Reason)
	}
}

// events returns run id's events of type T, read from its history.
func events[T event.Payload](t *testing.T, e *batchEnv, id string) ([]T, []time.Time) {
	t.Helper()
	s, err := e.eng.Snapshot(e.ctx, id)
	require.NoError(t, err)
	st, err := jsstore.New(e.ctx, e.js, nil)
	require.NoError(t, err)
	envs, err := st.Load(e.ctx, id, 0)
	require.NoError(t, err)
	require.Len(t, envs, int(s.Seq))
	var out []T
	var at []time.Time
	for _, env := range envs {
		if p, ok := env.Payload.(T); ok {
			out = append(out, p)
			at = append(at, env.Time)
		}
	}
	return out, at
}

// TestBatchFaultsRateAndStop: a terminate job whose executor dies after recording its targets
// (before the job says so), then one that dies with every target counted but the job not
// completed: each run is terminated once, under the job's delivery ID. A signal job at 20/s:
// the recorded times of its signals never put more than the rate plus the burst in a second.
// A cancel job stopped midway: the runs before its cursor are cancelled, those after are not.
func TestBatchFaultsRateAndStop(t *testing.T) {
	e := newBatchEnv(t)
	tiers := map[string]int{"iron": 5, "bronze": 40, "tin": 300}
	total := 0
	for tr, n := range tiers {
		require.NoError(t, fanout.Each(e.ctx, 16, n, func(i int) error { return e.start(fmt.Sprintf("%s-%03d", tr, i), tr) }))
		total += n
	}
	e.indexed(total, "tin-299", core.StatusPending)

	// Terminate, with two executor deaths.
	e.create(batch.Spec{Op: batch.OpTerminate, Where: `tier = "iron"`, Reason: "retired"}, "end-iron")
	f1 := &fault.Injector{}
	f1.Arm(fault.BatchAfterTargets, fault.Fail, 0, 1)
	s1 := e.executor("dies-after-targets", f1)
	require.Eventually(t, func() bool { return f1.Hits(fault.BatchAfterTargets) == 1 && !s1.Batching() }, time.Minute, 5*time.Millisecond)
	require.Equal(t, batch.StatePending, e.job("end-iron").State, "the targets are written, the job does not say so")
	f2 := &fault.Injector{}
	f2.Arm(fault.BatchBeforeEnd, fault.Fail, 0, 1)
	s2 := e.executor("dies-before-end", f2)
	require.Eventually(t, func() bool { return f2.Hits(fault.BatchBeforeEnd) == 1 && !s2.Batching() }, time.Minute, 5*time.Millisecond)
	j := e.job("end-iron")
	require.Equal(t, batch.StateRunning, j.State)
	require.Equal(t, 5, j.Cursor)
	require.Equal(t, 5, j.Applied)

	steady := e.executor("steady", nil)
	j = e.ended("end-iron")
	require.Equal(t, batch.StateCompleted, j.State)
	require.Equal(t, 5, j.Applied, "the window done before the death is not counted again")
	require.Equal(t, "steady", j.Executor)
	for i := range 5 {
		id := fmt.Sprintf("iron-%03d", i)
		failed, _ := events[*event.RunFailed](t, e, id)
		require.Len(t, failed, 1, id)
		require.Equal(t, batch.DeliveryID("end-iron", id), failed[0].DeliveryID)
		require.Equal(t, event.CauseOperator, failed[0].Cause)
	}
	// The same job again: every target is skipped as ended, none terminated twice.
	e.create(batch.Spec{Op: batch.OpTerminate, Where: `tier = "iron"`}, "end-iron-again")
	j = e.ended("end-iron-again")
	require.Equal(t, map[string]int{"already failed": 5}, j.Skipped)
	require.Zero(t, j.Applied)

	// Signal at 20/s.
	const rate = 20
	e.create(batch.Spec{Op: batch.OpSignal, Where: `tier = "bronze"`, Signal: "nudge", Payload: json.RawMessage(`{"n":1}`), Rate: rate}, "nudge-bronze")
	j = e.ended("nudge-bronze")
	require.Equal(t, 40, j.Applied)
	var times []time.Time
	for i := range 40 {
		id := fmt.Sprintf("bronze-%03d", i)
		sigs, at := events[*event.SignalReceived](t, e, id)
		require.Len(t, sigs, 1, id)
		require.Equal(t, batch.DeliveryID("nudge-bronze", id), sigs[0].DeliveryID)
		require.JSONEq(t, `{"n":1}`, string(sigs[0].Payload))
		times = append(times, at...)
	}
	slices.SortFunc(times, time.Time.Compare)
	burst := batch.BurstFor(rate)
	span := times[len(times)-1].Sub(times[0])
	t.Logf("40 signals at %d/s (burst %d) recorded over %s", rate, burst, span.Round(time.Millisecond))
	// The rate spaces the tokens' times; a signal's recorded time is its token's plus its append's
	// latency, which differs from append to append by up to a few hundred milliseconds on a
	// loaded machine (the first is the slowest: nothing of its run is cached). Unpaced, the 40
	// signals land within about 0.2 s.
	require.GreaterOrEqual(t, span, time.Duration(float64(40-burst)/rate*float64(time.Second))-300*time.Millisecond)
	for i := range times {
		in := 0
		for k := i; k < len(times) && times[k].Sub(times[i]) < time.Second; k++ {
			in++
		}
		// One more than the rate and the burst: an append's latency may move a start's record.
		require.LessOrEqual(t, in, rate+burst+1, "signals recorded within a second from %s", times[i])
	}

	// Stop a cancel job midway.
	e.create(batch.Spec{Op: batch.OpCancel, Where: `tier = "tin"`, Rate: 100}, "cancel-tin")
	require.Eventually(t, func() bool { return e.job("cancel-tin").Cursor >= 100 }, time.Minute, 10*time.Millisecond)
	_, err := e.store.Stop(e.ctx, "cancel-tin", "changed my mind", time.Now().UTC())
	require.NoError(t, err)
	j = e.ended("cancel-tin")
	require.Equal(t, batch.StateStopped, j.State)
	require.Less(t, j.Cursor, 300)
	require.Equal(t, j.Cursor, j.Applied)
	require.Equal(t, "changed my mind", j.StopReason)
	for i := range 300 {
		id := fmt.Sprintf("tin-%03d", i)
		cancels, _ := events[*event.RunCancelRequested](t, e, id)
		if i < j.Cursor {
			require.Len(t, cancels, 1, id)
		} else {
			require.Empty(t, cancels, "%s is after the stopped job's cursor", id)
		}
	}
	require.True(t, steady.Batching())
}

// TestBatchReset: a reset job resets each run once (run.reset in the old run, the same new run
// for a repeat of the job's delivery ID), through the engine's Reset.
func TestBatchReset(t *testing.T) {
	e := newBatchEnv(t)
	for i := range 3 {
		require.NoError(t, e.start(fmt.Sprintf("copper-%d", i), "copper"))
	}
	e.indexed(3, "copper-2", core.StatusPending)
	e.executor("resetter", nil)
	e.create(batch.Spec{Op: batch.OpReset, Where: `tier = "copper"`, Reason: "replay", Reset: &batch.ResetSpec{Mode: "seq", Seq: 1}}, "reset-copper")
	j := e.ended("reset-copper")
	require.Equal(t, batch.StateCompleted, j.State)
	require.Equal(t, 3, j.Applied, "failures: %v", j.Failures)
	for i := range 3 {
		resets, _ := events[*event.RunReset](t, e, fmt.Sprintf("copper-%d", i))
		require.Len(t, resets, 1)
	}
}
