// Package tracetest holds what tests of trace propagation share. Tests import it; production
// code does not.
package tracetest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// Remote returns a context carrying a sampled remote span with the tracestate "flow=1,vendor=x",
// and that span:
// traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.
func Remote(t testing.TB) (context.Context, trace.SpanContext) {
	t.Helper()
	tid, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	require.NoError(t, err)
	sid, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	require.NoError(t, err)
	ts, err := trace.ParseTraceState("flow=1,vendor=x")
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	return trace.ContextWithRemoteSpanContext(context.Background(), sc), sc
}
