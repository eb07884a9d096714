package streams_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
)

func TestLayoutOfOnePartition(t *testing.T) {
	t.Parallel()
	var l streams.Layout // the zero value: one stream, the subjects Flow always had
	require.Equal(t, 1, l.Partitions())
	require.False(t, l.Partitioned())
	require.Equal(t, "FLOW_HISTORY", l.StreamOf("r1"))
	require.Equal(t, "flow.history.r1", l.Subject("r1"))
	require.Equal(t, "flow.history.>", l.Filter(0))
	require.Equal(t, []string{"FLOW_HISTORY"}, l.Streams())
	require.Equal(t, streams.Names, l.Names())
	require.Equal(t, l, streams.NewLayout(1))
	require.Equal(t, l, streams.NewLayout(0))

	run, ok := l.RunOf("flow.history.r1")
	require.True(t, ok)
	require.Equal(t, "r1", run)
	for _, subject := range []string{"flow.history.", "flow.task.q.r1", "flow.history.0.r1"} {
		_, ok := l.RunOf(subject)
		require.False(t, ok, subject)
	}
}

func TestLayoutOfThreePartitions(t *testing.T) {
	t.Parallel()
	l := streams.NewLayout(3)
	require.Equal(t, 3, l.Partitions())
	require.Equal(t, []string{"FLOW_HISTORY_0", "FLOW_HISTORY_1", "FLOW_HISTORY_2"}, l.Streams())
	require.Equal(t, "flow.history.2.>", l.Filter(2))
	require.Equal(t, append([]string{"FLOW_HISTORY_0", "FLOW_HISTORY_1", "FLOW_HISTORY_2"}, streams.Names[1:]...), l.Names())

	counts := make([]int, 3)
	for i := range 3000 {
		run := fmt.Sprintf("run-%d", i)
		p := l.Partition(run)
		counts[p]++
		require.Equal(t, p, l.Partition(run), "stable")
		require.Equal(t, fmt.Sprintf("FLOW_HISTORY_%d", p), l.StreamOf(run))
		require.Equal(t, fmt.Sprintf("flow.history.%d.%s", p, run), l.Subject(run))
		back, ok := l.RunOf(l.Subject(run))
		require.True(t, ok)
		require.Equal(t, run, back)
		_, ok = l.RunOf(fmt.Sprintf("flow.history.%d.%s", (p+1)%3, run))
		require.False(t, ok, "a subject naming another partition than the run's is no run's")
	}
	for p, n := range counts {
		require.Greater(t, n, 800, "partition %d holds about a third of the runs: %v", p, counts)
	}
	// The partition of a run is part of Flow's storage format: it never changes.
	require.Equal(t, []int{1, 1, 2}, []int{l.Partition("a"), l.Partition("order-17"), l.Partition("01JABCDEF")})
}

func TestEnsurePartitioned(t *testing.T) {
	t.Parallel()
	js := emptyJetStream(t)
	ctx := t.Context()

	require.NoError(t, streams.Ensure(ctx, js, streams.Config{Partitions: 3}))
	l, err := streams.Load(ctx, js)
	require.NoError(t, err)
	require.Equal(t, streams.NewLayout(3), l)
	require.NoError(t, streams.Check(ctx, js))
	missing, err := streams.Missing(ctx, js)
	require.NoError(t, err)
	require.Empty(t, missing)
	for p, name := range l.Streams() {
		st, err := js.Stream(ctx, name)
		require.NoError(t, err)
		require.Equal(t, []string{l.Filter(p)}, st.CachedInfo().Config.Subjects)
	}

	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}), "a process without the setting adopts the layout")
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{Partitions: 3}))
	err = streams.Ensure(ctx, js, streams.Config{Partitions: 1})
	require.ErrorIs(t, err, streams.ErrConfig)
	require.ErrorContains(t, err, "the history is spread over 3 stream(s), and Partitions (FLOW_STREAMS_PARTITIONS) asks for 1")
	require.ErrorIs(t, streams.Ensure(ctx, js, streams.Config{Partitions: streams.MaxPartitions + 1}), streams.ErrConfig)

	one := emptyJetStream(t)
	require.NoError(t, streams.Ensure(ctx, one, streams.Config{}))
	err = streams.Ensure(ctx, one, streams.Config{Partitions: 4})
	require.ErrorContains(t, err, "the history is spread over 1 stream(s), and Partitions (FLOW_STREAMS_PARTITIONS) asks for 4")
}
