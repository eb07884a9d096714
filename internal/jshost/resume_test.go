package jshost_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/tracing"
)

// A resume task carries its run's trace context in the CloudEvents traceparent extension, or
// else the span of the context it was published with, or none.
func TestResumeCarriesTraceParent(t *testing.T) {
	ctx := t.Context()
	js, h := hostSetup(t)
	tasks, err := js.Stream(ctx, streams.Tasks)
	require.NoError(t, err)

	const run = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	other, ok := tracing.Parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	require.True(t, ok)
	spanCtx := trace.ContextWithRemoteSpanContext(context.Background(), other)
	for i, c := range []struct {
		ctx  context.Context
		task engine.Task
		want string
	}{
		{spanCtx, engine.Task{RunID: "r1", Seq: 1, TraceParent: run}, run},
		{spanCtx, engine.Task{RunID: "r2", Seq: 1}, tracing.Format(other)},
		{context.Background(), engine.Task{RunID: "r3", Seq: 1}, ""},
	} {
		require.NoError(t, h.Resume(c.ctx, c.task))
		m, err := tasks.GetMsg(ctx, uint64(i+1))
		require.NoError(t, err)
		require.Equal(t, c.task.RunID, m.Header.Get("ce-subject"))
		require.Equal(t, c.want, m.Header.Get(cloudevent.HeaderTraceParent), "task of %s", c.task.RunID)
		require.NotContains(t, string(m.Data), "traceparent", "the trace context is not part of the task's body")
		require.Empty(t, m.Header.Get("Traceparent"), "only the CloudEvents extension carries it")
	}
}
