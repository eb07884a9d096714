package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/memstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// Regression tests of defects fixed in the engine. Each test says above it how it fails when
// its fix is reverted.

// testClock is a virtual clock that moves only when told to.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock(t time.Time) *testClock { return &testClock{now: t} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// engineOn returns an engine of the bundle's code on st, a store shared with the test's other
// engines (another process, as far as the engine can tell). clock may be nil.
func (b *testBundle) engineOn(t *testing.T, st store.EventStore, clock engine.Clock) *engine.Engine {
	t.Helper()
	return b.engineWith(t, engine.Config{Store: st, Clock: clock})
}

// engineWith returns an engine of cfg, with the bundle's runtime, host and replayer and 4 step
// slots.
func (b *testBundle) engineWith(t *testing.T, cfg engine.Config) *engine.Engine {
	t.Helper()
	cfg.Runtime, cfg.Host, cfg.Replayer, cfg.StepConcurrency = sdk.RuntimeOf(b.reg), b.host, sdk.RuntimeOf(b.reg).Replaying(), 4
	e, err := engine.New(cfg)
	require.NoError(t, err)
	return e
}

// load returns the checked history of run runID in st.
func load(t *testing.T, st store.EventStore, runID string) []event.Envelope {
	t.Helper()
	hist, err := st.Load(context.Background(), runID, 0)
	require.NoError(t, err)
	require.Empty(t, core.Check(runID, hist))
	return hist
}

func typesOf(hist []event.Envelope) []event.Type {
	types := make([]event.Type, len(hist))
	for i, e := range hist {
		types[i] = e.Type()
	}
	return types
}

// find returns the first event of type typ in hist, or nil.
func find(hist []event.Envelope, typ event.Type) *event.Envelope {
	for i := range hist {
		if hist[i].Type() == typ {
			return &hist[i]
		}
	}
	return nil
}

type driveResult struct {
	res engine.Result
	err error
}

// driveAsync drives run runID in the background; the drive ends with the test at the latest.
func driveAsync(t *testing.T, e *engine.Engine, runID string) <-chan driveResult {
	done := make(chan driveResult, 1)
	go func() {
		res, err := e.Drive(t.Context(), runID, 0)
		done <- driveResult{res, err}
	}()
	return done
}

func awaitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "timed out waiting: "+what)
	}
}

func awaitDrive(t *testing.T, done <-chan driveResult, what string) engine.Result {
	t.Helper()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		return r.res
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Drive did not return: "+what)
		return engine.Result{}
	}
}

// Defect 1. Without the fix the driver does not follow other writers' commits while its step
// runs: the cancel from the other engine stays unseen, Drive waits out the step's 30s and the
// 10s deadline below fails (and the step's context is never cancelled).
func TestCancelFromAnotherEngineEndsRunWhileStepRuns(t *testing.T) {
	t.Parallel()
	started, ctxDone, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	var sawCancel, stepReturned atomic.Bool
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			if ctx.StepOutput("long") == nil {
				return ctx.ScheduleStep("long", "long", nil), nil
			}
			return ctx.Complete("done"), nil
		})
		flow.RegisterStep(reg, "long", func(ctx context.Context, _ any) (bool, error) {
			defer stepReturned.Store(true)
			close(started)
			select {
			case <-ctx.Done():
				sawCancel.Store(errors.Is(ctx.Err(), context.Canceled))
				close(ctxDone)
				// It keeps running after its cancellation: Drive must not wait for it.
				select {
				case <-release:
				case <-time.After(30 * time.Second):
				}
				return false, ctx.Err()
			case <-time.After(30 * time.Second):
				return true, nil
			}
		})
	})
	st := memstore.New()
	worker, other := b.engineOn(t, st, nil), b.engineOn(t, st, nil)
	runID := b.start(t, worker, "wf")
	done := driveAsync(t, worker, runID)
	awaitClosed(t, started, "the step started")
	cancelled := make(chan error, 1)
	time.AfterFunc(2*time.Millisecond, func() {
		to, err := other.Cancel(context.Background(), runID, "not needed any more")
		if err == nil && to != runID {
			err = errors.New("cancel went to " + to)
		}
		cancelled <- err
	})
	res := awaitDrive(t, done, "the run was cancelled while its step ran")
	require.NoError(t, <-cancelled)
	require.Equal(t, core.StatusCancelled, res.Status)
	awaitClosed(t, ctxDone, "the step's context was cancelled")
	require.True(t, sawCancel.Load())
	require.False(t, stepReturned.Load(), "Drive returned without waiting for the step")

	hist := load(t, st, runID)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeStepScheduled, event.TypeRunCancelRequested,
		event.TypeStepCancelled, event.TypeRunCancelled}, typesOf(hist))
	sc := find(hist, event.TypeStepCancelled).Payload.(*event.StepCancelled)
	require.Equal(t, []event.CancelledStep{{StepID: "long", Attempt: 1, SideEffectUnknown: true}}, sc.Steps)
	require.Equal(t, event.CauseCancelRequested, find(hist, event.TypeRunCancelled).Payload.(*event.RunCancelled).Cause)
	require.Nil(t, find(hist, event.TypeStepCompleted))
}

// Defect 2. Without the fix the driver only wakes for its step's result (or for inputs of its
// own engine): the other engine's signal and timer stay undecided while the step runs, and the
// Eventually checks time out.
func TestInputsFromAnotherEngineAreDecidedWhileStepRuns(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseSlow := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseSlow)
	var slowDone atomic.Bool
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			steps := ctx.Snapshot().Steps
			switch {
			case steps["slow"] == nil:
				return ctx.ScheduleStep("slow", "slow", nil), nil
			case ctx.Signal("go") == nil:
				return ctx.AwaitSignal("go", "go"), nil
			case !ctx.Fired("nap"):
				return ctx.Sleep("nap", time.Hour), nil
			case steps["after"] == nil || ctx.StepOutput("after") == nil:
				return ctx.ScheduleStep("after", "quick", nil), nil
			case ctx.StepOutput("slow") == nil:
				return ctx.ScheduleStep("slow", "slow", nil), nil
			}
			return ctx.Complete("all"), nil
		})
		flow.RegisterStep(reg, "slow", func(ctx context.Context, _ any) (bool, error) {
			defer slowDone.Store(true)
			close(started)
			select {
			case <-release:
				return true, nil
			case <-ctx.Done():
				return false, ctx.Err()
			}
		})
		flow.RegisterStep(reg, "quick", func(context.Context, any) (bool, error) { return true, nil })
	})
	st := memstore.New()
	// Serial commits: the inputs are sent once the step runs, which must be after its schedule
	// is committed (pipelined, the step may start ahead of it).
	worker := b.engineWith(t, engine.Config{Store: st, SerialCommits: true})
	other := b.engineOn(t, st, nil)
	runID := b.start(t, worker, "wf")
	done := driveAsync(t, worker, runID)
	awaitClosed(t, started, "the slow step started")

	has := func(typ event.Type, stepID string) func() bool {
		return func() bool {
			hist, err := st.Load(context.Background(), runID, 0)
			if err != nil {
				return false
			}
			for _, e := range hist {
				if e.Type() != typ {
					continue
				}
				if s, ok := e.Payload.(*event.StepScheduled); ok && s.Steps[0].ID != stepID {
					continue
				}
				return true
			}
			return false
		}
	}
	to, err := other.Signal(t.Context(), runID, "go", []byte(`1`), "d-1")
	require.NoError(t, err)
	require.Equal(t, runID, to)
	require.Eventually(t, has(event.TypeWaitScheduled, ""), 10*time.Second, time.Millisecond,
		"the signal was decided on while the step ran")
	require.False(t, slowDone.Load())

	require.NoError(t, other.Fire(t.Context(), core.Timer{RunID: runID, Kind: core.TimerWait, ID: "nap", Due: t0}))
	require.Eventually(t, has(event.TypeStepScheduled, "after"), 10*time.Second, time.Millisecond,
		"the timer was decided on while the step ran")
	require.Eventually(t, has(event.TypeStepCompleted, ""), 10*time.Second, time.Millisecond,
		"the next step ran while the slow one still ran")
	require.False(t, slowDone.Load())

	releaseSlow()
	res := awaitDrive(t, done, "the run completed")
	require.Equal(t, core.StatusCompleted, res.Status)
	hist := load(t, st, runID)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeStepScheduled, event.TypeSignalAwaited,
		event.TypeSignalReceived, event.TypeWaitScheduled, event.TypeWaitFired, event.TypeStepScheduled,
		event.TypeStepCompleted, event.TypeStepCompleted, event.TypeRunCompleted}, typesOf(hist))
	require.Equal(t, "after", hist[7].Payload.(*event.StepCompleted).StepID)
	require.Equal(t, "slow", hist[8].Payload.(*event.StepCompleted).StepID)
}

// Defect 3. The worker's clock advances 300ms while its step runs; the signal it decides on was
// stamped by another process whose clock did not. Without the fix (no core.Stamp at commit) the
// deadline counts from the signal, the run's previous event, and is 300ms short.
func TestSleepCountsFromItsOwnEvent(t *testing.T) {
	t.Parallel()
	const nap = time.Minute
	workerClock, otherClock := newTestClock(t0), newTestClock(t0)
	advanced, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseSlow := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseSlow)
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			switch {
			case ctx.Snapshot().Steps["slow"] == nil:
				return ctx.ScheduleStep("slow", "slow", nil), nil
			case ctx.Signal("go") == nil:
				return ctx.AwaitSignal("go", "go"), nil
			case !ctx.Fired("nap"):
				return ctx.Sleep("nap", nap), nil
			case ctx.StepOutput("slow") == nil:
				return ctx.ScheduleStep("slow", "slow", nil), nil
			}
			return ctx.Complete("rested"), nil
		})
		flow.RegisterStep(reg, "slow", func(ctx context.Context, _ any) (bool, error) {
			workerClock.Advance(300 * time.Millisecond) // the step takes its time
			close(advanced)
			select {
			case <-release:
				return true, nil
			case <-ctx.Done():
				return false, ctx.Err()
			}
		})
	})
	st := memstore.New()
	// Serial commits: the signal is sent once the step runs, which must be after its schedule
	// is committed (pipelined, the step may start ahead of it).
	worker := b.engineWith(t, engine.Config{Store: st, Clock: workerClock, SerialCommits: true})
	other := b.engineOn(t, st, otherClock)
	runID := b.start(t, worker, "wf")
	done := driveAsync(t, worker, runID)
	awaitClosed(t, advanced, "the step ran for 300ms")
	_, err := other.Signal(t.Context(), runID, "go", []byte(`1`), "d-1")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		hist, err := st.Load(context.Background(), runID, 0)
		return err == nil && find(hist, event.TypeWaitScheduled) != nil
	}, 10*time.Second, time.Millisecond, "the sleep was decided")
	releaseSlow()
	res := awaitDrive(t, done, "the run waits on its sleep")
	require.Equal(t, core.StatusSuspended, res.Status)

	hist := load(t, st, runID)
	signal, wait := find(hist, event.TypeSignalReceived), find(hist, event.TypeWaitScheduled)
	require.Equal(t, signal.Seq+1, wait.Seq, "the signal is the sleep's previous event")
	require.Equal(t, 300*time.Millisecond, wait.Time.Sub(signal.Time))
	ws := wait.Payload.(*event.WaitScheduled)
	require.Equal(t, event.Duration(nap), ws.Duration)
	require.Equal(t, wait.Time.Add(nap), ws.Deadline, "the deadline counts from the wait.scheduled event")

	// A cold load verifies the history by replay: the recorded deadline is not a change.
	replayer := b.engineOn(t, st, workerClock)
	res, err = replayer.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.NoError(t, res.Err)
	require.Equal(t, core.StatusSuspended, res.Status)
	require.Len(t, load(t, st, runID), len(hist), "nothing recorded: not a non-determinism")

	require.NoError(t, replayer.Fire(t.Context(), core.Timer{RunID: runID, Kind: core.TimerWait, ID: "nap", Due: ws.Deadline}))
	res, err = replayer.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
}

// pausingStore is a store without commit notices (it does not implement store.Follower) that
// holds up, once, the first append that holds an event of type on, after it committed,
// until resume is closed (or the appender's ctx ends).
type pausingStore struct {
	inner  store.EventStore
	on     event.Type
	once   sync.Once
	paused chan uint64
	resume chan struct{}
}

func newPausingStore(inner store.EventStore, on event.Type) *pausingStore {
	return &pausingStore{inner: inner, on: on, paused: make(chan uint64, 1), resume: make(chan struct{})}
}

// awaitPause returns the last sequence of the append held up.
func (s *pausingStore) awaitPause(t *testing.T) uint64 {
	t.Helper()
	select {
	case seq := <-s.paused:
		return seq
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no "+string(s.on)+" was appended")
		return 0
	}
}

func (s *pausingStore) Append(ctx context.Context, runID string, expected uint64, events ...event.Event) (uint64, error) {
	last, err := s.inner.Append(ctx, runID, expected, events...)
	if err != nil {
		return last, err
	}
	if slices.ContainsFunc(events, func(e event.Event) bool { return e.Payload.EventType() == s.on }) {
		s.once.Do(func() {
			s.paused <- last
			select {
			case <-s.resume:
			case <-ctx.Done(): // the test ended early
			}
		})
	}
	return last, nil
}

func (s *pausingStore) Load(ctx context.Context, runID string, after uint64) ([]event.Envelope, error) {
	return s.inner.Load(ctx, runID, after)
}

func (s *pausingStore) LoadAtLeast(ctx context.Context, runID string, after, atLeast uint64) ([]event.Envelope, error) {
	return s.inner.LoadAtLeast(ctx, runID, after, atLeast)
}

// Defect 4. The signal lands after the driver's last read, from a writer whose commits it is
// not told of, and its next decision appends nothing. Without Join (or without the driver
// honouring a joined sequence before it leaves) Drive returns suspended at the step's result,
// the signal unseen, and Join reports no active driver.
func TestJoinHandsTaskToActiveDriver(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			switch {
			case ctx.Snapshot().Steps["work"] == nil:
				return ctx.ScheduleStep("work", "work", nil), nil
			case ctx.Signal("go") == nil:
				return ctx.AwaitSignal("go", "go"), nil
			case ctx.StepOutput("work") == nil:
				return ctx.ScheduleStep("work", "work", nil), nil
			}
			return ctx.Complete(ctx.Signal("go")), nil
		})
		flow.RegisterStep(reg, "work", func(context.Context, any) (int, error) { return 7, nil })
	})
	mem := memstore.New()
	ps := newPausingStore(mem, event.TypeStepCompleted)
	_, follows := any(ps).(store.Follower)
	require.False(t, follows)
	e := b.engineOn(t, ps, nil)
	runID := b.start(t, e, "wf")
	require.False(t, e.Join(engine.Task{RunID: runID, Seq: 1}), "no drive is active")

	done := driveAsync(t, e, runID)
	stepSeq := ps.awaitPause(t)
	// Another writer appends the signal straight to the store.
	sigSeq, err := mem.Append(t.Context(), runID, stepSeq, event.Event{Time: t0,
		Payload: &event.SignalReceived{Name: "go", Payload: json.RawMessage(`"now"`), DeliveryID: "direct-1"}})
	require.NoError(t, err)
	require.True(t, e.Join(engine.Task{RunID: runID, Seq: sigSeq}), "the drive is active")
	close(ps.resume)

	res := awaitDrive(t, done, "the drive read the joined sequence")
	require.Equal(t, core.StatusCompleted, res.Status, "the drive saw the signal before it returned")
	require.Greater(t, res.Seq, sigSeq)
	hist := load(t, mem, runID)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeStepScheduled, event.TypeSignalAwaited,
		event.TypeStepCompleted, event.TypeSignalReceived, event.TypeRunCompleted}, typesOf(hist))
	require.False(t, e.Join(engine.Task{RunID: runID, Seq: res.Seq + 1}), "the drive ended")
}

// registerReplayed registers workflow "wf" whose first step gets input n: code with another n
// cannot replay a run recorded by this one.
func registerReplayed(reg *flow.Registry, n int) {
	flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.StepOutput("a") == nil {
			return ctx.ScheduleStep("a", "work", n), nil
		}
		return ctx.AwaitSignal("go", "go"), nil
	})
	flow.RegisterStep(reg, "work", func(_ context.Context, n int) (int, error) { return n, nil })
}

// Defect 5. Without the fix the replay check's error blocks the run before a cancellation is
// considered: the second drive stays blocked (no run.cancelled) however often it is driven.
func TestCancelEndsRunBlockedByReplayCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) { registerReplayed(reg, 1) }) // v1
	v1 := b.engine(t, 2)
	runID := b.start(t, v1, "wf")
	res, err := v1.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, res.Status)

	reg2 := flow.NewRegistry(nil) // v2: schedules step "a" with another input
	registerReplayed(reg2, 2)
	v2, err := engine.New(engine.Config{Store: b.store, Runtime: sdk.RuntimeOf(reg2), Host: b.host, Replayer: sdk.RuntimeOf(reg2).Replaying()})
	require.NoError(t, err)

	res, err = v2.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusBlocked, res.Status)
	var nd *core.NonDeterminismError
	require.ErrorAs(t, res.Err, &nd)
	hist := b.history(t, runID)
	failed, ok := hist[len(hist)-1].Payload.(*event.DecisionFailed)
	require.True(t, ok, "blocked: %v", typesOf(hist))
	require.Equal(t, core.FailureNonDeterminism, failed.Kind)
	require.Equal(t, nd.Code(), failed.Code)
	require.Equal(t, &event.Mismatch{Kind: "step", ID: "a", Field: "input", Recorded: "1", Produced: "2", Seq: 2}, failed.Mismatch,
		"decision.failed records what differs, field by field")
	s, err := v2.Snapshot(t.Context(), runID)
	require.NoError(t, err)
	require.Equal(t, failed.Mismatch, s.Blocked.Mismatch, "the snapshot's diagnosis carries it")

	to, err := v2.Cancel(t.Context(), runID, "give up")
	require.NoError(t, err)
	require.Equal(t, runID, to)
	res, err = v2.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusCancelled, res.Status)
	hist = b.history(t, runID)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeStepScheduled, event.TypeStepCompleted,
		event.TypeSignalAwaited, event.TypeDecisionFailed, event.TypeRunCancelRequested, event.TypeRunCancelled}, typesOf(hist))
	rc := hist[len(hist)-1].Payload.(*event.RunCancelled)
	require.Equal(t, event.CauseCancelRequested, rc.Cause)
	require.Contains(t, rc.Reason, "give up")
}

// takenHost refuses hook token "taken", as a host whose token routes to another run does.
type takenHost struct{ *host }

func (h takenHost) RegisterHook(ctx context.Context, token, runID, hookID string) error {
	if token == "taken" {
		return fmt.Errorf("token %q: %w", token, engine.ErrTokenTaken)
	}
	return h.host.RegisterHook(ctx, token, runID, hookID)
}

// Defects 4 and 5 together (bugs these tests found): a cancel whose task was joined to the
// drive that is recording the run's block must end the run. Both blocked paths (the code cannot
// decide; the host refused a hook token) returned blocked without reading the joined sequence or
// deciding on it, while the joined task was acknowledged: the cancellation waited for another
// input.
func TestJoinedCancelEndsRunBeingBlocked(t *testing.T) {
	t.Parallel()
	mem, h := memstore.New(), newHost()
	reg1 := flow.NewRegistry(nil)
	registerReplayed(reg1, 1)
	flow.RegisterWorkflow(reg1, "hooked", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		return ctx.CreateHook("cb", nil, flow.WithToken("taken")), nil
	})
	reg2 := flow.NewRegistry(nil)
	registerReplayed(reg2, 2)
	v1, err := engine.New(engine.Config{Store: mem, Runtime: sdk.RuntimeOf(reg1), Host: h})
	require.NoError(t, err)
	start := func(def string) string {
		spec, err := sdk.RuntimeOf(reg1).Spec(def, []byte("null"))
		require.NoError(t, err)
		runID, _, err := v1.Start(t.Context(), engine.StartParams{Spec: spec})
		require.NoError(t, err)
		return runID
	}
	replayed := start("wf")
	res, err := v1.Drive(t.Context(), replayed, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, res.Status)

	for _, tc := range []struct {
		name, runID string
		rt          *flow.Registry
		host        engine.Host
		before      []event.Type
	}{
		{"replay check", replayed, reg2, h, []event.Type{event.TypeRunStarted, event.TypeStepScheduled,
			event.TypeStepCompleted, event.TypeSignalAwaited, event.TypeDecisionFailed}},
		{"hook token taken", start("hooked"), reg1, takenHost{h}, []event.Type{event.TypeRunStarted, event.TypeDecisionFailed}},
	} {
		ps := newPausingStore(mem, event.TypeDecisionFailed)
		e, err := engine.New(engine.Config{Store: ps, Runtime: sdk.RuntimeOf(tc.rt), Host: tc.host, Replayer: sdk.RuntimeOf(tc.rt).Replaying()})
		require.NoError(t, err)
		done := driveAsync(t, e, tc.runID)
		blockedSeq := ps.awaitPause(t)
		// Another process requests the cancellation; its task reaches the worker that drives.
		cancelSeq, err := mem.Append(t.Context(), tc.runID, blockedSeq, event.Event{Time: time.Now().UTC(),
			Payload: &event.RunCancelRequested{Reason: "give up"}})
		require.NoError(t, err)
		require.True(t, e.Join(engine.Task{RunID: tc.runID, Seq: cancelSeq}), tc.name)
		close(ps.resume)

		res := awaitDrive(t, done, tc.name+": the drive decided on the joined cancel")
		require.Equal(t, core.StatusCancelled, res.Status, tc.name)
		hist := load(t, mem, tc.runID)
		want := append(tc.before, event.TypeRunCancelRequested, event.TypeRunCancelled)
		require.Equal(t, want, typesOf(hist), tc.name)
		require.Equal(t, event.CauseCancelRequested, hist[len(hist)-1].Payload.(*event.RunCancelled).Cause, tc.name)
	}
}

// Defect 6. Without the fix an input sent to a run that continued as new is refused as sent to
// an ended run (or lands nowhere): Signal and Cancel fail or name the first run, and neither the
// latest generation nor the unstarted successor records it.
func TestInputsFollowContinuations(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "gen", func(ctx *flow.Context, n int) (flow.Decision, error) {
			if n < 2 {
				return ctx.ContinueAsNew(n + 1), nil
			}
			if ctx.Signal("go") == nil {
				return ctx.AwaitSignal("go", "go"), nil
			}
			return ctx.Complete(n), nil
		})
	})
	e := b.engine(t, 1)
	spec, err := sdk.RuntimeOf(b.reg).Spec("gen", []byte(`0`))
	require.NoError(t, err)
	startChain := func(root string) {
		_, created, err := e.Start(t.Context(), engine.StartParams{RunID: root, Spec: spec, Input: []byte(`0`)})
		require.NoError(t, err)
		require.True(t, created)
	}

	startChain("r")
	for _, id := range []string{"r", "r=1", "r=2"} {
		res, err := e.Drive(t.Context(), id, 0)
		require.NoError(t, err)
		if id != "r=2" {
			require.Equal(t, core.StatusContinuedAsNew, res.Status)
		}
	}
	to, err := e.Signal(t.Context(), "r", "go", []byte(`"hi"`), "d-1")
	require.NoError(t, err)
	require.Equal(t, "r=2", to)
	to, err = e.Signal(t.Context(), "r=1", "go", []byte(`"hi"`), "d-1")
	require.NoError(t, err, "a redelivery is accepted again")
	require.Equal(t, "r=2", to)
	to, err = e.Cancel(t.Context(), "r", "stop")
	require.NoError(t, err)
	require.Equal(t, "r=2", to)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeSignalAwaited, event.TypeSignalReceived,
		event.TypeRunCancelRequested}, typesOf(b.history(t, "r=2")))
	for _, id := range []string{"r", "r=1"} {
		require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeRunContinuedAsNew}, typesOf(b.history(t, id)))
	}

	// A successor that is not started yet (the drive that ended its predecessor stopped before
	// the end-of-run work) is started by the input that follows the chain.
	inj := &fault.Injector{}
	inj.Arm(fault.AfterTerminalBeforeEnd, fault.Fail, 0, 1)
	ef, err := engine.New(engine.Config{Store: b.store, Runtime: sdk.RuntimeOf(b.reg), Host: b.host, Faults: inj})
	require.NoError(t, err)
	startChain("q")
	res, err := ef.Drive(t.Context(), "q", 0)
	require.ErrorIs(t, err, fault.ErrInjected)
	require.Equal(t, core.StatusContinuedAsNew, res.Status)
	unstarted, err := b.store.Load(t.Context(), "q=1", 0)
	require.NoError(t, err)
	require.Empty(t, unstarted)

	to, err = e.Signal(t.Context(), "q", "go", []byte(`"hi"`), "d-1")
	require.NoError(t, err)
	require.Equal(t, "q=1", to)
	hist := b.history(t, "q=1")
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeSignalReceived}, typesOf(hist))
	rs := hist[0].Payload.(*event.RunStarted)
	require.Equal(t, "q", rs.ContinuedFrom)
	require.Equal(t, 1, rs.Generation)
	require.JSONEq(t, `1`, string(rs.Input))
}

// Defect 7. Without the fix the child's spec is taken from the applying engine's code (the new
// build) instead of child.scheduled, and an existing child is only recognised by an equal spec:
// the child would start pinned to v2, or the re-apply would record child.settled (run_exists).
func TestReappliedChildScheduledKeepsChild(t *testing.T) {
	t.Parallel()
	kid := func(ctx *flow.Context, _ int) (flow.Decision, error) { return ctx.AwaitSignal("go", "go"), nil }
	parent := func(ctx *flow.Context, _ any) (flow.Decision, error) { return ctx.StartChild("kid", "kid", 5), nil }
	reg1 := flow.NewRegistry(&flow.RegistryOptions{BuildID: "v1"})
	flow.RegisterWorkflow(reg1, "parent", parent)
	flow.RegisterWorkflow(reg1, "kid", kid, flow.WithPatches("p1"))
	reg2 := flow.NewRegistry(&flow.RegistryOptions{BuildID: "v2"})
	flow.RegisterWorkflow(reg2, "parent", parent)
	flow.RegisterWorkflow(reg2, "kid", kid, flow.WithPatches("p1", "p2"))
	st, h := memstore.New(), newHost()

	// v1 decides the child; its fast path (starting the child at once) does not happen.
	inj := &fault.Injector{}
	inj.Arm(fault.AfterDecisionBeforeChildren, fault.Fail, 0, 1)
	v1, err := engine.New(engine.Config{Store: st, Runtime: sdk.RuntimeOf(reg1), Host: h, BuildID: "v1", Faults: inj})
	require.NoError(t, err)
	spec, err := sdk.RuntimeOf(reg1).Spec("parent", []byte("null"))
	require.NoError(t, err)
	parentID, _, err := v1.Start(t.Context(), engine.StartParams{Spec: spec})
	require.NoError(t, err)
	_, err = v1.Drive(t.Context(), parentID, 0)
	require.ErrorIs(t, err, fault.ErrInjected)
	parentHist := load(t, st, parentID)
	cs := find(parentHist, event.TypeChildScheduled)
	require.NotNil(t, cs)
	childSpec := cs.Payload.(*event.ChildScheduled).Children[0]
	require.Equal(t, "v1", childSpec.BuildID)
	require.Equal(t, []string{"p1"}, childSpec.Patches)
	childID := childSpec.RunID

	// After the deploy the history service (an engine of build v2) applies the commit, twice.
	v2, err := engine.New(engine.Config{Store: st, Runtime: sdk.RuntimeOf(reg2), Host: h, BuildID: "v2"})
	require.NoError(t, err)
	for range 2 {
		s, err := v2.Snapshot(t.Context(), parentID)
		require.NoError(t, err)
		require.NoError(t, v2.ApplyCommit(t.Context(), s, []event.Envelope{*cs}))
	}
	childHist := load(t, st, childID)
	require.Len(t, childHist, 1)
	rs := childHist[0].Payload.(*event.RunStarted)
	require.Equal(t, event.Spec{Definition: "kid", BuildID: "v1", Patches: []string{"p1"}}, rs.Spec, "the recorded spec")
	require.Equal(t, &event.ParentRef{RunID: parentID, ChildID: "kid"}, rs.Parent)
	require.Equal(t, typesOf(parentHist), typesOf(load(t, st, parentID)), "the child did not fail")

	// An old history recorded no child spec; an engine without code applies it again.
	old := load(t, st, parentID)
	oldCommit := *find(old, event.TypeChildScheduled)
	oc := oldCommit.Payload.(*event.ChildScheduled)
	oc.Children[0].BuildID, oc.Children[0].Patches = "", nil
	bare, err := engine.New(engine.Config{Store: st, Host: h})
	require.NoError(t, err)
	s, err := bare.Snapshot(t.Context(), parentID)
	require.NoError(t, err)
	require.NoError(t, bare.ApplyCommit(t.Context(), s, []event.Envelope{oldCommit}))
	require.Equal(t, typesOf(parentHist), typesOf(load(t, st, parentID)), "the child did not fail")
	require.Len(t, load(t, st, childID), 1)
	s, err = bare.Snapshot(t.Context(), parentID)
	require.NoError(t, err)
	require.False(t, s.Children["kid"].Settled)
}

// Defect 8. Without the fix the engine decides the run with code that lacks its definition and
// records decision.failed (unknown_definition): the history grows and Drive returns no error.
func TestUnknownDefinitionRecordsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) { return ctx.Complete(nil), nil })
	})
	verifying := b.engine(t, 1)
	plain, err := engine.New(engine.Config{Store: b.store, Runtime: sdk.RuntimeOf(b.reg), Host: b.host})
	require.NoError(t, err)
	_, _, err = verifying.Start(t.Context(), engine.StartParams{RunID: "ghost-1", Spec: event.Spec{Definition: "ghost"}, Queue: "reports"})
	require.NoError(t, err)
	_, err = verifying.Signal(t.Context(), "ghost-1", "poke", []byte(`1`), "d-1")
	require.NoError(t, err)
	for _, e := range []*engine.Engine{verifying, plain, verifying} {
		_, err := e.Drive(t.Context(), "ghost-1", 0)
		var unknown *engine.UnknownDefinitionError
		require.ErrorAs(t, err, &unknown)
		require.Equal(t, "ghost-1", unknown.RunID)
		require.Equal(t, "ghost", unknown.Definition)
		require.Equal(t, "reports", unknown.Queue)
		require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeSignalReceived}, typesOf(b.history(t, "ghost-1")))
	}
}

// releasingHost is the test host with hook tokens that ReleaseHook frees.
type releasingHost struct {
	*host
	released []string
}

func (h *releasingHost) ReleaseHook(_ context.Context, token, runID, hookID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hooks[token] == [2]string{runID, hookID} {
		delete(h.hooks, token)
	}
	h.released = append(h.released, token)
	return nil
}

// Defect 9. Without the fix a failing timer registration is only logged (ApplyCommit returns
// nil and the timer is lost), and a terminal commit leaves the run's wait timer and hook token.
func TestApplyCommitTimersAndEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			if ctx.Snapshot().Hooks["cb"] == nil {
				return ctx.CreateHook("cb", nil, flow.WithToken("tok-1")), nil
			}
			return ctx.Sleep("nap", time.Hour), nil
		})
	})
	h := &releasingHost{host: b.host}
	e, err := engine.New(engine.Config{Store: b.store, Runtime: sdk.RuntimeOf(b.reg), Host: h, Replayer: sdk.RuntimeOf(b.reg).Replaying()})
	require.NoError(t, err)
	runID := b.start(t, e, "wf")
	res, err := e.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, res.Status)
	owner, hookID, err := h.LookupHook(t.Context(), "tok-1")
	require.NoError(t, err)
	require.Equal(t, [2]string{runID, "cb"}, [2]string{owner, hookID})

	hist := b.history(t, runID)
	wait := find(hist, event.TypeWaitScheduled)
	require.NotNil(t, wait)
	commit := []event.Envelope{*wait}
	s, err := e.Snapshot(t.Context(), runID)
	require.NoError(t, err)
	h.failTimers.Store(1)
	require.Error(t, e.ApplyCommit(t.Context(), s, commit), "the host's failure is returned")
	require.Zero(t, h.timerCount())
	require.NoError(t, e.ApplyCommit(t.Context(), s, commit), "applying again registers the timer")
	h.mu.Lock()
	timer, ok := h.timers[runID+"/wait.nap"]
	h.mu.Unlock()
	require.True(t, ok)
	require.Equal(t, core.Timer{RunID: runID, Kind: core.TimerWait, ID: "nap", Due: wait.Payload.(*event.WaitScheduled).Deadline, Seq: wait.Seq}, timer)

	_, err = e.Terminate(t.Context(), runID, "enough")
	require.NoError(t, err)
	hist = b.history(t, runID)
	end := hist[len(hist)-1]
	require.Equal(t, event.TypeRunFailed, end.Type())
	s, err = e.Snapshot(t.Context(), runID)
	require.NoError(t, err)
	require.NoError(t, e.ApplyCommit(t.Context(), s, []event.Envelope{end}))
	require.Zero(t, h.timerCount(), "the moot wait timer is deleted")
	h.mu.Lock()
	released := append([]string(nil), h.released...)
	h.mu.Unlock()
	require.Equal(t, []string{"tok-1"}, released)
	_, _, err = h.LookupHook(t.Context(), "tok-1")
	require.ErrorIs(t, err, core.ErrNotFound, "the token is free for other runs")
}
