package limits

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStepTake(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	conc := StepLimit{Concurrency: 1}
	st := &StepState{}
	ok, _, _ := st.take(conc, "r1/a/1", 0, now)
	require.True(t, ok)
	ok, _, _ = st.take(conc, "r1/a/1", 0, now)
	require.True(t, ok, "a holder asking again holds its slot")
	ok, wait, why := st.take(conc, "r2/a/1", 0, now)
	require.False(t, ok)
	require.Positive(t, wait)
	require.Contains(t, why, "concurrency limit")
	require.Contains(t, st.Waiting, "r2/a/1")
	ok, _, why = st.take(conc, "r3/a/1", 5, now)
	require.False(t, ok, "%s", why)
	// The slot frees; the waiter of higher priority takes it first.
	delete(st.Holders, "r1/a/1")
	ok, _, why = st.take(conc, "r2/a/1", 0, now.Add(time.Second))
	require.False(t, ok)
	require.Contains(t, why, "higher priority (5)")
	ok, _, _ = st.take(conc, "r3/a/1", 5, now.Add(time.Second))
	require.True(t, ok)
	require.NotContains(t, st.Waiting, "r3/a/1")
	// Its worker dies: the lease runs out and the slot frees for the next.
	ok, _, _ = st.take(conc, "r2/a/1", 0, now.Add(stepLease+2*time.Second))
	require.True(t, ok)

	rate := StepLimit{Rate: 2, Period: time.Second}
	st = &StepState{}
	for _, k := range []string{"x/a/1", "y/a/1"} {
		ok, _, _ := st.take(rate, k, 0, now)
		require.True(t, ok)
		delete(st.Holders, k)
	}
	ok, wait, why = st.take(rate, "z/a/1", 0, now.Add(100*time.Millisecond))
	require.False(t, ok)
	require.Contains(t, why, "rate limit")
	require.InDelta(t, float64(900*time.Millisecond), float64(wait), float64(2*time.Millisecond))
	ok, _, _ = st.take(rate, "z/a/1", 0, now.Add(time.Second+time.Millisecond))
	require.True(t, ok)
	require.Len(t, st.Log, 1, "starts older than the period are dropped")
}
