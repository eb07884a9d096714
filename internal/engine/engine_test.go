package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// host is an in-memory engine.Host shared by the engines of a test.
type host struct {
	mu         sync.Mutex
	timers     map[string]core.Timer
	hooks      map[string][2]string
	resumed    []string
	failTimers atomic.Int32
}

func newHost() *host { return &host{timers: map[string]core.Timer{}, hooks: map[string][2]string{}} }

func (h *host) ScheduleTimers(_ context.Context, ts []core.Timer) error {
	if h.failTimers.Add(-1) >= 0 {
		return errors.New("timer index unavailable")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range ts {
		h.timers[t.RunID+"/"+t.Key()] = t
	}
	return nil
}

func (h *host) DeleteTimers(_ context.Context, ts []core.Timer) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range ts {
		delete(h.timers, t.RunID+"/"+t.Key())
	}
	return nil
}

func (h *host) ReleaseHook(context.Context, string, string, string) error { return nil }

func (h *host) RegisterHook(_ context.Context, token, runID, hookID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hooks[token] = [2]string{runID, hookID}
	return nil
}

func (h *host) LookupHook(_ context.Context, token string) (string, string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o, ok := h.hooks[token]
	if !ok {
		return "", "", core.ErrNotFound
	}
	return o[0], o[1], nil
}

func (h *host) Resume(_ context.Context, t engine.Task) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resumed = append(h.resumed, t.RunID)
	return nil
}

func (h *host) timerCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.timers)
}

// countingStore records the 'after' argument of every Load.
type countingStore struct {
	store.EventStore
	mu     sync.Mutex
	afters []uint64
}

func (s *countingStore) Load(ctx context.Context, runID string, after uint64) ([]event.Envelope, error) {
	s.mu.Lock()
	s.afters = append(s.afters, after)
	s.mu.Unlock()
	return s.EventStore.Load(ctx, runID, after)
}

type testBundle struct {
	store *countingStore
	host  *host
	reg   *flow.Registry
}

func setup(t *testing.T, register func(reg *flow.Registry)) *testBundle {
	t.Helper()
	reg := flow.NewRegistry(nil)
	register(reg)
	return &testBundle{store: &countingStore{EventStore: memstore.New()}, host: newHost(), reg: reg}
}

func (b *testBundle) engine(t *testing.T, concurrency int) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{Store: b.store, Runtime: sdk.RuntimeOf(b.reg), Host: b.host, Replayer: sdk.RuntimeOf(b.reg).Replaying(), StepConcurrency: concurrency})
	require.NoError(t, err)
	return e
}

func (b *testBundle) start(t *testing.T, e *engine.Engine, def string) string {
	t.Helper()
	spec, err := sdk.RuntimeOf(b.reg).Spec(def, []byte("null"))
	require.NoError(t, err)
	runID, created, err := e.Start(t.Context(), engine.StartParams{Spec: spec})
	require.NoError(t, err)
	require.True(t, created)
	return runID
}

func (b *testBundle) history(t *testing.T, runID string) []event.Envelope {
	t.Helper()
	hist, err := b.store.EventStore.Load(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Empty(t, core.Check(runID, hist))
	return hist
}

func TestConcurrentDriversConverge(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "fan", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			for round := range 3 {
				var batch []flow.Step
				done := true
				for i := range 4 {
					id := fmt.Sprintf("r%d-s%d", round, i)
					batch = append(batch, flow.Step{ID: id, Name: "work", Input: id})
					done = done && ctx.StepOutput(id) != nil
				}
				if !done {
					return ctx.ScheduleSteps(batch...), nil
				}
			}
			return ctx.Complete("done"), nil
		})
		flow.RegisterStep(reg, "work", func(_ context.Context, id string) (string, error) {
			calls.Add(1)
			return id, nil
		})
	})
	engines := []*engine.Engine{b.engine(t, 4), b.engine(t, 4), b.engine(t, 2)}
	for range 10 {
		runID := b.start(t, engines[0], "fan")
		var wg sync.WaitGroup
		for _, e := range engines {
			wg.Go(func() {
				for {
					res, err := e.Drive(t.Context(), runID, 0)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Status.Terminal() {
						return
					}
				}
			})
		}
		wg.Wait()
		hist := b.history(t, runID)
		completed := map[string]int{}
		for _, e := range hist {
			if c, ok := e.Payload.(*event.StepCompleted); ok {
				completed[c.StepID]++
			}
		}
		require.Len(t, completed, 12)
		for id, n := range completed {
			require.Equal(t, 1, n, "step %s completed once in history", id)
		}
		require.Equal(t, event.TypeRunCompleted, hist[len(hist)-1].Type())
	}
	require.GreaterOrEqual(t, int(calls.Load()), 120, "every step ran at least once")
}

func TestActiveDriverWakesOnExternalEvents(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{})
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			if _, scheduled := ctx.Snapshot().Steps["slow"]; !scheduled {
				return ctx.ScheduleStep("slow", "slow", nil), nil
			}
			if ctx.Signal("go") == nil {
				return ctx.AwaitSignal("go", "go"), nil
			}
			if ctx.StepOutput("slow") == nil {
				return ctx.ScheduleStep("slow", "slow", nil), nil
			}
			return ctx.Complete("both"), nil
		})
		flow.RegisterStep(reg, "slow", func(ctx context.Context, _ any) (bool, error) {
			close(started)
			select {
			case <-release:
				return true, nil
			case <-ctx.Done():
				return false, ctx.Err()
			}
		})
	})
	// Serial commits: the signal is sent once the step runs, which must be after the decisions
	// before it are committed (pipelined, the step may start ahead of them).
	e := b.engineWith(t, engine.Config{Store: b.store, SerialCommits: true})
	runID := b.start(t, e, "wf")
	done := make(chan engine.Result, 1)
	go func() {
		res, err := e.Drive(t.Context(), runID, 0)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-started
	_, err := e.Signal(t.Context(), runID, "go", []byte(`1`), "d-1")
	require.NoError(t, err, "delivered while the driver holds the run")
	require.Eventually(t, func() bool {
		s, err := e.Snapshot(t.Context(), runID)
		return err == nil && s.SignalWaits["go"] != nil && s.SignalWaits["go"].Received()
	}, 10*time.Second, time.Millisecond, "the driver decided on the signal while the step still ran")
	close(release)
	res := <-done
	require.Equal(t, core.StatusCompleted, res.Status)
	hist := b.history(t, runID)
	var types []event.Type
	for _, e := range hist {
		types = append(types, e.Type())
	}
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeStepScheduled, event.TypeSignalAwaited,
		event.TypeSignalReceived, event.TypeStepCompleted, event.TypeRunCompleted}, types)
}

func TestCacheReadsOnlyTheTail(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			n := len(ctx.Snapshot().Signals)
			if n == 3 {
				return ctx.Complete(n), nil
			}
			return ctx.AwaitSignal(fmt.Sprintf("s%d", n), "poke"), nil
		})
	})
	e := b.engine(t, 1)
	runID := b.start(t, e, "wf")
	_, err := e.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	for i := range 3 {
		_, err := e.Signal(t.Context(), runID, "poke", []byte(`1`), fmt.Sprintf("d%d", i))
		require.NoError(t, err)
		b.store.mu.Lock()
		b.store.afters = nil
		b.store.mu.Unlock()
		res, err := e.Drive(t.Context(), runID, 0)
		require.NoError(t, err)
		b.store.mu.Lock()
		require.NotContains(t, b.store.afters, uint64(0), "a warm drive never re-reads the history from the start")
		b.store.mu.Unlock()
		if i == 2 {
			require.Equal(t, core.StatusCompleted, res.Status)
		}
	}
}

func TestDriveRefusesRunsOfAnotherBuild(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "wf", func(ctx *flow.Context, _ any) (flow.Decision, error) { return ctx.Complete(nil), nil })
	})
	e := b.engine(t, 1)
	_, _, err := e.Start(t.Context(), engine.StartParams{RunID: "pinned", Spec: event.Spec{Definition: "wf", BuildID: "v9"}})
	require.NoError(t, err)
	_, err = e.Drive(t.Context(), "pinned", 0)
	var wrong *engine.WrongBuildError
	require.ErrorAs(t, err, &wrong)
	require.Equal(t, "v9", wrong.RunBuild)
	require.Len(t, b.history(t, "pinned"), 1, "nothing was decided")

	_, err = e.Drive(t.Context(), "missing", 0)
	require.ErrorIs(t, err, core.ErrNotFound)
}

// Existing checks a start against the run it names without appending: any build and patches
// match, another definition, input or queue does not.
func TestExisting(t *testing.T) {
	t.Parallel()
	b := setup(t, func(*flow.Registry) {})
	e := b.engine(t, 1)
	ctx := t.Context()
	_, _, err := e.Start(ctx, engine.StartParams{RunID: "r1", Spec: event.Spec{Definition: "order", BuildID: "v7", Patches: []string{"p"}},
		Input: []byte(`{"a":1}`), Queue: "q"})
	require.NoError(t, err)
	for _, tt := range []struct {
		name   string
		p      engine.StartParams
		exists bool
		field  string
	}{
		{"Same", engine.StartParams{RunID: "r1", Spec: event.Spec{Definition: "order"}, Input: []byte(`{ "a": 1 }`), Queue: "q"}, true, ""},
		{"Missing", engine.StartParams{RunID: "r2", Spec: event.Spec{Definition: "order"}, Queue: "q"}, false, ""},
		{"OtherDefinition", engine.StartParams{RunID: "r1", Spec: event.Spec{Definition: "refund"}, Input: []byte(`{"a":1}`), Queue: "q"}, true, "definition"},
		{"OtherInput", engine.StartParams{RunID: "r1", Spec: event.Spec{Definition: "order"}, Input: []byte(`{"a":2}`), Queue: "q"}, true, "input"},
		{"OtherQueue", engine.StartParams{RunID: "r1", Spec: event.Spec{Definition: "order"}, Input: []byte(`{"a":1}`), Queue: "other"}, true, "queue"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			exists, err := e.Existing(ctx, tt.p)
			require.Equal(t, tt.exists, exists)
			if tt.field == "" {
				require.NoError(t, err)
			} else {
				var re *engine.RunExistsError
				require.ErrorAs(t, err, &re)
				require.Equal(t, tt.field, re.Field)
			}
		})
	}
	for run, n := range map[string]int{"r1": 1, "r2": 0} {
		hist, err := b.store.EventStore.Load(ctx, run, 0)
		require.NoError(t, err)
		require.Len(t, hist, n, "nothing appended to run %s", run)
	}
}
