package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/memstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// readCounter counts the reads of a store.
type readCounter struct {
	store.EventStore
	reads atomic.Int32
}

func (s *readCounter) Load(ctx context.Context, runID string, after uint64) ([]event.Envelope, error) {
	s.reads.Add(1)
	return s.EventStore.Load(ctx, runID, after)
}

func (s *readCounter) LoadAtLeast(ctx context.Context, runID string, after, atLeast uint64) ([]event.Envelope, error) {
	s.reads.Add(1)
	return s.EventStore.LoadAtLeast(ctx, runID, after, atLeast)
}

// sleeper sleeps under wait "nap" for an hour, then completes.
func sleeper(reg *flow.Registry) {
	flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.Fired("nap") {
			return ctx.Complete("rested"), nil
		}
		return ctx.Sleep("nap", time.Hour), nil
	})
}

// sleeping starts a run of sleeper on a worker engine of b on st, drives it to its sleep and
// returns its pending timer.
func sleeping(t *testing.T, b *testBundle, st store.EventStore) core.Timer {
	t.Helper()
	return suspended(t, b, b.engineOn(t, st, nil))
}

// suspended starts a run of sleeper on worker, drives it to its sleep and returns its pending
// timer.
func suspended(t *testing.T, b *testBundle, worker *engine.Engine) core.Timer {
	t.Helper()
	runID := b.start(t, worker, "wf")
	res, err := worker.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, res.Status)
	s, err := worker.Snapshot(t.Context(), runID)
	require.NoError(t, err)
	timers := core.Timers(s)
	require.Len(t, timers, 1)
	return timers[0]
}

// schedulerEngine returns an engine as a scheduler has one: no runtime, its own cache.
func schedulerEngine(t *testing.T, b *testBundle, st store.EventStore) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{Store: st, Host: b.host})
	require.NoError(t, err)
	return e
}

// A timer whose run was preloaded fires with one append and no read.
func TestPreloadedTimerFiresWithoutReading(t *testing.T) {
	t.Parallel()
	b := setup(t, sleeper)
	mem := memstore.New()
	timer := sleeping(t, b, mem)

	reads := &readCounter{EventStore: mem}
	sched := schedulerEngine(t, b, reads)
	require.NoError(t, sched.Preload(t.Context(), timer))
	require.EqualValues(t, 1, reads.reads.Load(), "the preload reads the run")
	require.NoError(t, sched.Preload(t.Context(), timer))
	require.EqualValues(t, 1, reads.reads.Load(), "a run cached up to the timer's event is not read again")

	require.NoError(t, sched.Fire(t.Context(), timer))
	require.EqualValues(t, 1, reads.reads.Load(), "the fire reads nothing")
	hist := load(t, mem, timer.RunID)
	require.Equal(t, event.TypeWaitFired, hist[len(hist)-1].Type())
}

// A preloaded snapshot that another writer got ahead of is caught by the append's expected
// sequence: the fire reads what was appended and decides again, firing the timer once, after
// the other writer's event, or not at all if the other writer fired it.
func TestPreloadedTimerAfterAnotherWriter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		other func(t *testing.T, e *engine.Engine, timer core.Timer)
		// fired says whether the preloaded scheduler's fire appends wait.fired.
		fired bool
	}{
		{"signal", func(t *testing.T, e *engine.Engine, timer core.Timer) {
			_, err := e.Signal(t.Context(), timer.RunID, "ping", []byte(`1`), "d1")
			require.NoError(t, err)
		}, true},
		{"cancel requested", func(t *testing.T, e *engine.Engine, timer core.Timer) {
			_, err := e.Cancel(t.Context(), timer.RunID, "test")
			require.NoError(t, err)
		}, true},
		{"fired by another replica", func(t *testing.T, e *engine.Engine, timer core.Timer) {
			require.NoError(t, e.Fire(t.Context(), timer))
		}, false},
		{"terminated", func(t *testing.T, e *engine.Engine, timer core.Timer) {
			_, err := e.Terminate(t.Context(), timer.RunID, "test")
			require.NoError(t, err)
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, sleeper)
			mem := memstore.New()
			timer := sleeping(t, b, mem)
			sched := schedulerEngine(t, b, mem)
			require.NoError(t, sched.Preload(t.Context(), timer))
			tt.other(t, schedulerEngine(t, b, mem), timer)
			before := load(t, mem, timer.RunID)

			require.NoError(t, sched.Fire(t.Context(), timer))
			hist := load(t, mem, timer.RunID) // checked: no gaps, no event twice
			require.LessOrEqual(t, countType(hist, event.TypeWaitFired), 1, "wait.fired recorded once at most")
			if tt.fired {
				require.Len(t, hist, len(before)+1)
				require.Equal(t, event.TypeWaitFired, hist[len(hist)-1].Type(), "fired after the other writer's event")
			} else {
				require.Len(t, hist, len(before), "found moot: nothing appended")
			}
		})
	}
}

func countType(hist []event.Envelope, typ event.Type) int {
	n := 0
	for _, e := range hist {
		if e.Type() == typ {
			n++
		}
	}
	return n
}

// A snapshot cached before the timer's event cannot show the timer as moot: it is read up to
// the event that scheduled the timer, or, when the timer does not name that event, afresh.
func TestCachedSnapshotOlderThanTheTimer(t *testing.T) {
	t.Parallel()
	for _, known := range []bool{true, false} {
		t.Run(map[bool]string{true: "seq known", false: "seq unknown"}[known], func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(reg *flow.Registry) {
				flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
					switch {
					case ctx.Signal("go") == nil:
						return ctx.AwaitSignal("go", "go"), nil
					case !ctx.Fired("nap"):
						return ctx.Sleep("nap", time.Hour), nil
					}
					return ctx.Complete("rested"), nil
				})
			})
			mem := memstore.New()
			worker := b.engineOn(t, mem, nil)
			runID := b.start(t, worker, "wf")
			_, err := worker.Drive(t.Context(), runID, 0)
			require.NoError(t, err)
			sched := schedulerEngine(t, b, mem)
			// The scheduler's engine caches the run as it records the signal, before the sleep.
			_, err = sched.Signal(t.Context(), runID, "go", []byte(`1`), "d1")
			require.NoError(t, err)
			res, err := worker.Drive(t.Context(), runID, 0)
			require.NoError(t, err)
			require.Equal(t, core.StatusSuspended, res.Status)
			s, err := worker.Snapshot(t.Context(), runID)
			require.NoError(t, err)
			timer := core.Timers(s)[0]
			if !known {
				timer.Seq = 0
			}

			require.NoError(t, sched.Fire(t.Context(), timer))
			require.Equal(t, 1, countType(load(t, mem, runID), event.TypeWaitFired), "the timer fired")
		})
	}
}

// tailOf returns the tail of run runID in st, as a scheduler reads it: run.started's routing and
// the last event.
func tailOf(t *testing.T, st store.EventStore, runID string) engine.RunTail {
	t.Helper()
	hist := load(t, st, runID)
	rs := hist[0].Payload.(*event.RunStarted)
	return engine.RunTail{Queue: rs.Queue, Build: rs.Spec.BuildID, TraceParent: rs.TraceParent, Last: hist[len(hist)-1]}
}

// A timer whose event is its run's last fires on the run's tail: one append, no read.
func TestFireOnTailReadsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, sleeper)
	mem := memstore.New()
	timer := sleeping(t, b, mem)
	tail := tailOf(t, mem, timer.RunID)
	require.True(t, tail.Fires(timer))

	reads := &readCounter{EventStore: mem}
	sched := schedulerEngine(t, b, reads)
	resumed := b.host.resumeCount()
	require.NoError(t, sched.FireOnTail(t.Context(), timer, tail))
	require.Zero(t, reads.reads.Load(), "the firing reads nothing")
	hist := load(t, mem, timer.RunID)
	require.Len(t, hist, int(timer.Seq)+1)
	require.Equal(t, &event.WaitFired{WaitID: "nap"}, hist[len(hist)-1].Payload)
	require.False(t, hist[len(hist)-1].Time.Before(tail.Last.Time), "recorded times never go backwards")
	require.Equal(t, resumed+1, b.host.resumeCount(), "the run's resume task is sent")

	// Fired again on the same tail (a retry, another replica): the append conflicts, the run
	// is read and the timer found moot.
	require.NoError(t, sched.FireOnTail(t.Context(), timer, tail))
	require.Len(t, load(t, mem, timer.RunID), len(hist), "fired once")
	require.Positive(t, reads.reads.Load(), "a conflict reads the run")
}

// A tail that does not end with the timer's event makes FireOnTail read the run, as Fire does:
// the run moved on (it may have fired the timer, or ended), or the replica that answered lags.
func TestFireOnTailThatMovedOn(t *testing.T) {
	t.Parallel()
	b := setup(t, sleeper)
	mem := memstore.New()
	timer := sleeping(t, b, mem)
	stale := tailOf(t, mem, timer.RunID)
	other := schedulerEngine(t, b, mem)
	_, err := other.Signal(t.Context(), timer.RunID, "ping", []byte(`1`), "d1")
	require.NoError(t, err)

	moved := tailOf(t, mem, timer.RunID)
	require.False(t, moved.Fires(timer), "the run's last event is the signal")
	lagging := stale
	lagging.Last = load(t, mem, timer.RunID)[timer.Seq-2] // the event before the timer's
	require.False(t, lagging.Fires(timer), "a replica that lags answers with an earlier event")

	for _, tail := range []engine.RunTail{stale, moved, lagging} {
		require.NoError(t, schedulerEngine(t, b, mem).FireOnTail(t.Context(), timer, tail))
	}
	h := load(t, mem, timer.RunID)
	require.Equal(t, 1, countType(h, event.TypeWaitFired), "fired once")
	require.Equal(t, event.TypeWaitFired, h[len(h)-1].Type(), "after the signal")
}

// The firing's recorded time is never before the run's last event, whatever the firing
// process's clock says.
func TestFireOnTailKeepsTimeMonotonic(t *testing.T) {
	t.Parallel()
	b := setup(t, sleeper)
	mem := memstore.New()
	timer := sleeping(t, b, mem)
	tail := tailOf(t, mem, timer.RunID)
	behind := newTestClock(tail.Last.Time.Add(-time.Hour))
	sched, err := engine.New(engine.Config{Store: mem, Host: b.host, Clock: behind})
	require.NoError(t, err)
	require.NoError(t, sched.FireOnTail(t.Context(), timer, tail))
	h := load(t, mem, timer.RunID)
	require.Equal(t, tail.Last.Time, h[len(h)-1].Time)
}

func (h *host) resumeCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.resumed)
}

// A firing's resume task carries the firing's commit: the worker holding the run, suspended on
// the timer, applies it and completes the run without reading it.
func TestFiringTaskCarriesTheFiring(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"on tail", "on cached snapshot", "on read"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			b := setup(t, sleeper)
			st := &positionedStore{EventStore: memstore.New(), observed: map[string][2]uint64{}}
			h := &taskHost{host: b.host}
			worker, err := engine.New(engine.Config{Store: st, Runtime: sdk.RuntimeOf(b.reg), Host: h, Replayer: sdk.RuntimeOf(b.reg).Replaying()})
			require.NoError(t, err)
			timer := suspended(t, b, worker)
			runID := timer.RunID

			sched, err := engine.New(engine.Config{Store: st, Host: h})
			require.NoError(t, err)
			switch path {
			case "on tail":
				require.NoError(t, sched.FireOnTail(t.Context(), timer, tailOf(t, st, runID)))
			case "on cached snapshot":
				require.NoError(t, sched.Preload(t.Context(), timer))
				require.NoError(t, sched.Fire(t.Context(), timer))
			default:
				require.NoError(t, sched.Fire(t.Context(), timer))
			}
			task := h.tasks[len(h.tasks)-1]
			require.NotNil(t, task.Head, "the task carries the firing")
			require.EqualValues(t, timer.Seq+1, task.Seq)

			reads := st.reads.Load()
			res, err := worker.DriveTask(t.Context(), task)
			require.NoError(t, err)
			require.Equal(t, core.StatusCompleted, res.Status)
			require.Equal(t, reads, st.reads.Load(), "the worker read nothing")
			hist := load(t, st, runID)
			require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeWaitScheduled, event.TypeWaitFired, event.TypeRunCompleted}, typesOf(hist))
		})
	}
}
