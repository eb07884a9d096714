package tracing

import (
	"context"

	"github.com/cloudevents/sdk-go/v2/binding/spec"
	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/extensions"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// The CloudEvents distributed-tracing extension's attributes and their NATS binary-mode
// headers ("ce-" and the attribute's name, as the SDK's NATS binding names extensions).
var (
	HeaderTraceParent = spec.WithPrefix("ce-").Version(ce.CloudEventsVersionV1).Prefix() + extensions.TraceParentExtension
	HeaderTraceState  = spec.WithPrefix("ce-").Version(ce.CloudEventsVersionV1).Prefix() + extensions.TraceStateExtension
)

// Extension returns the distributed-tracing extension of the span ctx carries; TraceParent is
// "" when ctx carries no valid span context.
func Extension(ctx context.Context) extensions.DistributedTracingExtension {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return extensions.DistributedTracingExtension{}
	}
	x := extensions.DistributedTracingExtension{TraceParent: Format(sc)}
	if sc.TraceState().Len() > 0 {
		x.TraceState = sc.TraceState().String()
	}
	return x
}

// SetExtension records the span ctx carries in ec's extensions (traceparent, and tracestate when
// there is one), so that cloudevent.WriteHeaders writes ce-traceparent. A ctx without a valid
// span context leaves ec unchanged.
func SetExtension(ctx context.Context, ec *ce.EventContextV1) {
	SetTraceParent(ec, Extension(ctx))
}

// SetTraceParent records x in ec's extensions; an empty x.TraceParent leaves ec unchanged.
func SetTraceParent(ec *ce.EventContextV1, x extensions.DistributedTracingExtension) {
	if x.TraceParent == "" {
		return
	}
	if ec.Extensions == nil {
		ec.Extensions = map[string]any{}
	}
	ec.Extensions[extensions.TraceParentExtension] = x.TraceParent
	if x.TraceState != "" {
		ec.Extensions[extensions.TraceStateExtension] = x.TraceState
	}
}

// FromHeaders returns the remote span context of a CloudEvent in NATS binary mode
// (ce-traceparent, ce-tracestate); ok is false when it carries none, or a malformed one.
func FromHeaders(h nats.Header) (trace.SpanContext, bool) {
	if h == nil {
		return trace.SpanContext{}, false
	}
	return ParseWithState(first(h, HeaderTraceParent), first(h, HeaderTraceState))
}

// FromEvent returns the remote span context of a decoded CloudEvent's distributed-tracing
// extension; ok is false when it has none.
func FromEvent(ev *ce.Event) (trace.SpanContext, bool) {
	x, ok := extensions.GetDistributedTracingExtension(*ev)
	if !ok {
		return trace.SpanContext{}, false
	}
	return ParseWithState(x.TraceParent, x.TraceState)
}

// first reads header name without canonicalising it (nats.Header.Get canonicalises nothing
// either, but a missing key must not allocate).
func first(h nats.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}
