package engine_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store/memstore"
)

// The drive of a run taken from an offer appends only once its task is stored (Task.Backing),
// and, when its copy of the task was not the first, appends nothing and runs no step: the
// earlier copy's holder drives the run.
func TestBackingGatesTheDrive(t *testing.T) {
	t.Parallel()
	errStore := errors.New("the stream refused the task")
	for _, tc := range []struct {
		name    string
		fresh   bool
		err     error
		wantErr error
		steps   int32
		status  core.Status
	}{
		{name: "first copy", fresh: true, steps: 2, status: core.StatusCompleted},
		{name: "a copy was queued before", fresh: false, wantErr: engine.ErrTaskQueued},
		{name: "not stored", err: errStore, wantErr: errStore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			b := setup(t, sequentialSteps(2, &runs))
			st := &positionedStore{EventStore: memstore.New(), observed: map[string][2]uint64{}}
			h := &taskHost{host: b.host}
			starter, err := engine.New(engine.Config{Store: st, Runtime: sdk.RuntimeOf(b.reg), Host: h})
			require.NoError(t, err)
			runID := b.start(t, starter, "seq")
			task := h.tasks[0]
			var asked atomic.Int32
			task.FirstDelivery = true
			task.Backing = func() (bool, error) {
				asked.Add(1)
				return tc.fresh, tc.err
			}
			taker, err := engine.New(engine.Config{Store: st, Runtime: sdk.RuntimeOf(b.reg), Host: h})
			require.NoError(t, err)
			res, err := taker.DriveTask(t.Context(), task)
			hist := load(t, st, runID)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.Len(t, hist, 1, "nothing appended after run.started")
				require.Zero(t, runs.Load(), "no step ran ahead of a commit")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.status, res.Status)
			require.Equal(t, tc.steps, runs.Load())
			require.Positive(t, asked.Load())
			require.Empty(t, core.Check(runID, hist))
		})
	}
}
