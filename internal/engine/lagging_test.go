package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/memstore"
	"github.com/flowrun/flow/pkg/event"
)

// laggingStore answers Load like a replica that has only the run's first event: what a
// nats-server that restarted and is catching up serves to direct gets. LoadAtLeast reads
// what it is asked for, as from the stream's leader.
type laggingStore struct{ store.EventStore }

func (s laggingStore) Load(ctx context.Context, runID string, after uint64) ([]event.Envelope, error) {
	return s.LoadAtLeast(ctx, runID, after, 0)
}

func (s laggingStore) LoadAtLeast(ctx context.Context, runID string, after, atLeast uint64) ([]event.Envelope, error) {
	envs, err := s.EventStore.Load(ctx, runID, after)
	if err != nil {
		return nil, err
	}
	seen := max(atLeast, 1)
	for i, e := range envs {
		if e.Seq > seen {
			return envs[:i], nil
		}
	}
	return envs, nil
}

// A timer that falls due while the replica answering reads lags behind the event that
// scheduled it is fired, not dropped as moot (seen once in the compose chaos test: a reminder
// stayed suspended after a NATS node restarted).
func TestFireReadsUpToTheTimersEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, sleeper)
	mem := memstore.New()
	timer := sleeping(t, b, mem)
	s, err := b.engineOn(t, mem, nil).Snapshot(t.Context(), timer.RunID)
	require.NoError(t, err)
	require.Equal(t, s.Waits["nap"].Seq, timer.Seq, "the timer names the event that scheduled it")

	lagging := b.engineOn(t, laggingStore{mem}, nil)
	require.NoError(t, lagging.Fire(t.Context(), timer))
	require.Contains(t, typesOf(load(t, mem, timer.RunID)), event.TypeWaitFired, "the timer fired")
}

// behindStore answers every read, LoadAtLeast included, with the run's first event only: a
// stream leader that has not applied what its followers hold.
type behindStore struct{ store.EventStore }

func (s behindStore) Load(ctx context.Context, runID string, after uint64) ([]event.Envelope, error) {
	return laggingStore(s).LoadAtLeast(ctx, runID, after, 0)
}

func (s behindStore) LoadAtLeast(ctx context.Context, runID string, after, _ uint64) ([]event.Envelope, error) {
	return laggingStore(s).LoadAtLeast(ctx, runID, after, 0)
}

// A read that falls short of a sequence known to exist is an error to retry (store.ErrBehind),
// never a snapshot to act on: a drive for a task would miss the task's input, and a timer
// would look moot and be dropped.
func TestReadsShortOfAKnownSequenceAreRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, sleeper)
	mem := memstore.New()
	timer := sleeping(t, b, mem)
	runID := timer.RunID
	s, err := b.engineOn(t, mem, nil).Snapshot(t.Context(), runID)
	require.NoError(t, err)

	short := b.engineOn(t, behindStore{mem}, nil)
	_, err = short.Drive(t.Context(), runID, s.Seq)
	require.ErrorIs(t, err, store.ErrBehind, "a drive for a task at seq %d", s.Seq)
	require.ErrorIs(t, short.Fire(t.Context(), timer), store.ErrBehind, "a timer fired on a short read")
	require.NotContains(t, typesOf(load(t, mem, runID)), event.TypeWaitFired)
}
