package tracing_test

import (
	"context"
	"testing"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/internal/tracing"
)

// remote returns a context carrying a sampled remote span with a tracestate.
func remote(t *testing.T) (context.Context, trace.SpanContext) {
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

func TestTraceParentRoundTrip(t *testing.T) {
	ctx, sc := remote(t)
	tp := tracing.TraceParent(ctx)
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tp)
	got, ok := tracing.Parse(tp)
	require.True(t, ok)
	require.Equal(t, sc.TraceID(), got.TraceID())
	require.Equal(t, sc.SpanID(), got.SpanID())
	require.True(t, got.IsSampled())
	require.True(t, got.IsRemote())

	require.Empty(t, tracing.TraceParent(context.Background()), "no span, no traceparent")
	for _, bad := range []string{"", "00-zz-00f067aa0ba902b7-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "garbage"} {
		_, ok := tracing.Parse(bad)
		require.False(t, ok, "%q", bad)
		_, ok = tracing.Link(bad)
		require.False(t, ok, "%q", bad)
		require.Equal(t, context.Background(), tracing.WithRemote(context.Background(), bad))
	}
	l, ok := tracing.Link(tp)
	require.True(t, ok)
	require.Equal(t, sc.SpanID(), l.SpanContext.SpanID())
}

// The extension written into a CloudEvent's NATS headers (the writers' fast path) reads back
// from the headers, and through the SDK's NATS binding as the event's distributed-tracing
// extension.
func TestExtensionRoundTrip(t *testing.T) {
	ctx, sc := remote(t)
	ec := cloudevent.NewContext(cloudevent.Source("flow/test"), "dev.flow.test")
	ec.ID, *ec.Subject = "run-1:1", "run-1"
	tracing.SetExtension(ctx, ec)
	msg := nats.NewMsg("flow.test")
	msg.Data = []byte(`{}`)
	cloudevent.WriteHeaders(ec, msg.Header, nil)
	require.Equal(t, "ce-traceparent", tracing.HeaderTraceParent)
	require.Equal(t, []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, msg.Header["ce-traceparent"])
	require.Equal(t, []string{"flow=1,vendor=x"}, msg.Header["ce-tracestate"])

	got, ok := tracing.FromHeaders(msg.Header)
	require.True(t, ok)
	require.Equal(t, sc.TraceID(), got.TraceID())
	require.Equal(t, sc.SpanID(), got.SpanID())
	require.Equal(t, "flow=1,vendor=x", got.TraceState().String())

	ev, err := binding.ToEvent(context.Background(), cenats.NewMessage(msg))
	require.NoError(t, err)
	got, ok = tracing.FromEvent(ev)
	require.True(t, ok)
	require.Equal(t, sc.TraceID(), got.TraceID())
	require.Equal(t, sc.SpanID(), got.SpanID())
}

func TestExtensionAbsent(t *testing.T) {
	ec := cloudevent.NewContext(cloudevent.Source("flow/test"), "dev.flow.test")
	tracing.SetExtension(context.Background(), ec)
	require.Empty(t, ec.Extensions, "a context without a span writes no extension")
	_, ok := tracing.FromHeaders(nil)
	require.False(t, ok)
	_, ok = tracing.FromHeaders(nats.Header{"ce-traceparent": {"not a traceparent"}})
	require.False(t, ok)
}
