package engine_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

func (s *countingStore) loads() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.afters)
}

func (s *countingStore) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.afters = nil
}

func TestReadSnapshot(t *testing.T) {
	t.Parallel()
	release, running := make(chan struct{}), make(chan struct{}, 1)
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "slow", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			if out := ctx.StepOutput("wait"); out != nil {
				if ctx.Signal("more") == nil {
					return ctx.AwaitSignal("more", "more"), nil
				}
				return ctx.Complete(out), nil
			}
			return ctx.ScheduleStep("wait", "block", nil), nil
		})
		flow.RegisterStep(reg, "block", func(ctx context.Context, _ any) (string, error) {
			running <- struct{}{}
			select {
			case <-release:
				return "released", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		})
	})
	e := b.engine(t, 4)
	ctx := t.Context()
	runID := b.start(t, e, "slow")
	driven := make(chan error, 1)
	go func() { _, err := e.Drive(ctx, runID, 1); driven <- err }()
	<-running

	t.Run("DuringAStepTheDriverHandsOverACopy", func(t *testing.T) {
		b.store.reset()
		s, err := e.ReadSnapshot(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, core.StatusRunning, s.Status)
		require.Equal(t, uint64(2), s.Seq)
		require.Equal(t, []uint64{2}, b.store.loads(), "a warm copy reads only the run's tail")
		// The copy is the caller's: changing it changes nothing the engine holds.
		s.Steps["wait"].Status = core.StepFailed
		delete(s.Steps, "wait")
		again, err := e.ReadSnapshot(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, core.StepRunning, again.Steps["wait"].Status)
	})

	close(release)
	require.NoError(t, <-driven)

	t.Run("SuspendedRunIsCopiedFromTheCache", func(t *testing.T) {
		b.store.reset()
		s, err := e.ReadSnapshot(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, core.StatusSuspended, s.Status)
		require.Equal(t, []uint64{s.Seq}, b.store.loads())
	})

	t.Run("ACommitByAnotherWriterIsRead", func(t *testing.T) {
		before, err := e.ReadSnapshot(ctx, runID)
		require.NoError(t, err)
		_, err = b.store.Append(ctx, runID, before.Seq, event.Event{Time: time.Now().UTC(),
			Payload: &event.SignalReceived{Name: "more", Payload: []byte(`1`), DeliveryID: "d-1"}})
		require.NoError(t, err)
		s, err := e.ReadSnapshot(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, before.Seq+1, s.Seq, "the signal, committed but not decided on, is in the copy")
		require.Equal(t, 1, s.Progress.SignalsReceived)
	})

	t.Run("EndedRunIsReadFromHistory", func(t *testing.T) {
		_, err := e.Drive(ctx, runID, 0)
		require.NoError(t, err)
		s, err := e.ReadSnapshot(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, core.StatusCompleted, s.Status)
	})

	t.Run("UnknownRun", func(t *testing.T) {
		_, err := e.ReadSnapshot(ctx, "nobody")
		require.ErrorIs(t, err, core.ErrNotFound)
	})

	t.Run("ColdEngineReadsHistory", func(t *testing.T) {
		cold := b.engine(t, 1)
		s, err := cold.ReadSnapshot(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, core.StatusCompleted, s.Status)
		require.Zero(t, cold.CachedRuns(), "reading does not fill the cache")
	})
}

// A worker that dies (or whose append fails) between computing a side effect's value and
// recording it loses nothing: the next drive computes it again, and the value recorded once is
// the one every later decision reads.
func TestSideEffectRecordedOnceAfterAFailedAppend(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "numbered", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			n, d, err := flow.SideEffectValue(ctx, "number", func() int32 { return calls.Add(1) })
			if d != nil || err != nil {
				return d, err
			}
			return ctx.Complete(n), nil
		})
	})
	e := b.engine(t, 1)
	runID := b.start(t, e, "numbered")
	inj := &fault.Injector{}
	inj.Arm(fault.StoreAppend, fault.Fail, 0, 1)
	faulty, err := engine.New(engine.Config{Store: b.store, Runtime: sdk.RuntimeOf(b.reg), Host: b.host, Faults: inj})
	require.NoError(t, err)
	_, err = faulty.Drive(t.Context(), runID, 1)
	require.ErrorIs(t, err, fault.ErrInjected)
	require.Len(t, b.history(t, runID), 1, "nothing was recorded")

	res, err := e.Drive(t.Context(), runID, 1)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.EqualValues(t, 2, calls.Load(), "the value is computed again")
	hist := b.history(t, runID)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeSideEffectRecorded, event.TypeRunCompleted}, typesOf(hist))
	require.JSONEq(t, `2`, string(hist[1].Payload.(*event.SideEffectRecorded).Value))
	require.JSONEq(t, `2`, string(hist[2].Payload.(*event.RunCompleted).Output))
}
