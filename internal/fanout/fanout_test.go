package fanout_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/fanout"
)

func TestEachCallsEveryIndexOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ workers, n int }{{1, 10}, {4, 100}, {64, 3}, {0, 5}, {8, 0}} {
		var mu sync.Mutex
		seen := map[int]int{}
		var inFlight, most atomic.Int32
		err := fanout.Each(t.Context(), tc.workers, tc.n, func(i int) error {
			now := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			mu.Lock()
			defer mu.Unlock()
			seen[i]++
			return nil
		})
		require.NoError(t, err)
		require.Len(t, seen, tc.n, "workers=%d n=%d", tc.workers, tc.n)
		for i, c := range seen {
			require.Equal(t, 1, c, "index %d", i)
		}
		require.LessOrEqual(t, int(most.Load()), max(1, tc.workers))
	}
}

func TestEachStopsAtTheFirstError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var calls atomic.Int32
	err := fanout.Each(t.Context(), 1, 100, func(i int) error {
		calls.Add(1)
		if i == 3 {
			return boom
		}
		return nil
	})
	require.ErrorIs(t, err, boom)
	require.Less(t, int(calls.Load()), 100, "no call starts after the error is seen")
}

func TestEachStopsWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	err := fanout.Each(ctx, 1, 100, func(i int) error {
		if i == 2 {
			cancel()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
}
