package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStepSlotsByPriority: a freed slot goes to the waiter of the highest priority, then to the
// first come.
func TestStepSlotsByPriority(t *testing.T) {
	t.Parallel()
	s := newStepSlots(1)
	require.True(t, s.tryAcquire())
	require.False(t, s.tryAcquire())
	got := make(chan int, 3)
	for i, p := range []int{0, 5, 0} {
		go func() {
			require.NoError(t, s.acquire(context.Background(), p))
			got <- i
		}()
		require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.waiters) == i+1 }, time.Second, time.Millisecond)
	}
	var order []int
	for range 3 {
		s.release()
		order = append(order, <-got)
	}
	require.Equal(t, []int{1, 0, 2}, order)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, s.acquire(ctx, 9))
	s.release()
	require.True(t, s.tryAcquire(), "a waiter that gave up holds nothing")
}
