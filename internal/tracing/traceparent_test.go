package tracing_test

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/internal/tracing/tracetest"
)

// Format and Parse agree with OpenTelemetry's W3C propagator.
func TestTraceParentMatchesPropagator(t *testing.T) {
	var w3c propagation.TraceContext
	for i := range 200 {
		var tid trace.TraceID
		var sid trace.SpanID
		_, _ = rand.Read(tid[:])
		_, _ = rand.Read(sid[:])
		flags := trace.TraceFlags(0)
		if i%2 == 0 {
			flags = trace.FlagsSampled
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags})
		h := propagation.MapCarrier{}
		w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), h)
		require.Equal(t, h["traceparent"], tracing.Format(sc))

		got, ok := tracing.Parse(h["traceparent"])
		require.True(t, ok)
		want := trace.SpanContextFromContext(w3c.Extract(context.Background(), h))
		require.True(t, want.Equal(got), "%s", h["traceparent"])
	}
}

func TestTraceParentVersions(t *testing.T) {
	const ids = "-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for tp, ok := range map[string]bool{
		"00" + ids:            true,
		"01" + ids + "-extra": true, // a later version may append fields
		"01" + ids:            true,
		"00" + ids + "-extra": false, // version 00 has exactly four fields
		"ff" + ids:            false,
		"0g" + ids:            false,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": false, // lowercase only
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01": false, // invalid span ID
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0":  false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01": false,
	} {
		_, got := tracing.Parse(tp)
		require.Equal(t, ok, got, "%q", tp)
	}
	sc, ok := tracing.Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03")
	require.True(t, ok)
	require.Equal(t, trace.FlagsSampled, sc.TraceFlags(), "unknown flags are dropped")
}

func BenchmarkParseFormat(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		sc, _ := tracing.Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		_ = tracing.Format(sc)
	}
}

func TestTraceParentRoundTrip(t *testing.T) {
	ctx, sc := tracetest.Remote(t)
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
