package cloudevent_test

import (
	"context"
	"testing"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/internal/tracing/tracetest"
)

// The extension written into a CloudEvent's NATS headers (the writers' fast path) reads back
// from the headers, and through the SDK's NATS binding as the event's distributed-tracing
// extension.
func TestExtensionRoundTrip(t *testing.T) {
	ctx, sc := tracetest.Remote(t)
	ec := cloudevent.NewContext(cloudevent.Source("flow/test"), "dev.flow.test")
	ec.ID, *ec.Subject = "run-1:1", "run-1"
	cloudevent.SetTraceExtension(ctx, ec)
	msg := nats.NewMsg("flow.test")
	msg.Data = []byte(`{}`)
	cloudevent.WriteHeaders(ec, msg.Header, nil)
	require.Equal(t, "ce-traceparent", cloudevent.HeaderTraceParent)
	require.Equal(t, []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, msg.Header["ce-traceparent"])
	require.Equal(t, []string{"flow=1,vendor=x"}, msg.Header["ce-tracestate"])

	got, ok := cloudevent.TraceFromHeaders(msg.Header)
	require.True(t, ok)
	require.Equal(t, sc.TraceID(), got.TraceID())
	require.Equal(t, sc.SpanID(), got.SpanID())
	require.Equal(t, "flow=1,vendor=x", got.TraceState().String())

	ev, err := binding.ToEvent(context.Background(), cenats.NewMessage(msg))
	require.NoError(t, err)
	got, ok = cloudevent.TraceFromEvent(ev)
	require.True(t, ok)
	require.Equal(t, sc.TraceID(), got.TraceID())
	require.Equal(t, sc.SpanID(), got.SpanID())
}

func TestExtensionAbsent(t *testing.T) {
	ec := cloudevent.NewContext(cloudevent.Source("flow/test"), "dev.flow.test")
	cloudevent.SetTraceExtension(context.Background(), ec)
	require.Empty(t, ec.Extensions, "a context without a span writes no extension")
	_, ok := cloudevent.TraceFromHeaders(nil)
	require.False(t, ok)
	_, ok = cloudevent.TraceFromHeaders(nats.Header{"ce-traceparent": {"not a traceparent"}})
	require.False(t, ok)
}
