package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/memstore"
	"github.com/flowrun/flow/pkg/event"
)

// positionedStore is a memstore that implements store.Positioner (every commit "sits" at its
// run sequence times ten) and counts reads.
type positionedStore struct {
	store.EventStore
	reads    atomic.Int32
	mu       sync.Mutex
	observed map[string][2]uint64
}

func (s *positionedStore) LoadAtLeast(ctx context.Context, runID string, after, atLeast uint64) ([]event.Envelope, error) {
	s.reads.Add(1)
	return s.EventStore.LoadAtLeast(ctx, runID, after, atLeast)
}

func (s *positionedStore) Position(runID string) (uint64, uint64, bool) {
	hist, err := s.EventStore.Load(context.Background(), runID, 0)
	if err != nil || len(hist) == 0 {
		return 0, 0, false
	}
	return uint64(len(hist)), 10 * uint64(len(hist)), true
}

func (s *positionedStore) ObservePosition(runID string, runSeq, pos uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observed[runID] = [2]uint64{runSeq, pos}
}

// taskHost is the test host, keeping the resume tasks it is sent.
type taskHost struct {
	*host
	mu    sync.Mutex
	tasks []engine.Task
}

func (h *taskHost) Resume(ctx context.Context, t engine.Task) error {
	h.mu.Lock()
	h.tasks = append(h.tasks, t)
	h.mu.Unlock()
	return h.host.Resume(ctx, t)
}

// A new run's task carries its run.started and where that commit sits: the worker that drives
// it reads nothing before its first decision, and appends after the position it was told.
func TestNewRunTaskCarriesItsHistory(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	b := setup(t, sequentialSteps(1, &runs))
	st := &positionedStore{EventStore: memstore.New(), observed: map[string][2]uint64{}}
	h := &taskHost{host: b.host}
	e, err := engine.New(engine.Config{Store: st, Runtime: sdk.RuntimeOf(b.reg), Host: h, Replayer: sdk.RuntimeOf(b.reg).Replaying()})
	require.NoError(t, err)
	runID := b.start(t, e, "seq")
	require.Len(t, h.tasks, 1)
	task := h.tasks[0]
	require.NotNil(t, task.Head)
	require.EqualValues(t, 10, task.Head.Position)

	// Another engine, as another process: nothing cached.
	worker, err := engine.New(engine.Config{Store: st, Runtime: sdk.RuntimeOf(b.reg), Host: h, Replayer: sdk.RuntimeOf(b.reg).Replaying()})
	require.NoError(t, err)
	reads := st.reads.Load()
	res, err := worker.DriveTask(t.Context(), task)
	require.NoError(t, err)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.Equal(t, reads, st.reads.Load(), "the drive read nothing")
	require.Equal(t, [2]uint64{1, 10}, st.observed[runID])

	// A head that is not the run's is ignored: the run is read from the store.
	other := b.start(t, e, "seq")
	wrong := h.tasks[len(h.tasks)-1]
	wrong.Head = task.Head
	res, err = worker.DriveTask(t.Context(), wrong)
	require.NoError(t, err)
	require.Equal(t, other, res.RunID)
	require.Equal(t, core.StatusCompleted, res.Status)
	require.Greater(t, st.reads.Load(), reads)
	require.Empty(t, core.Check(other, load(t, st, other)))
}
