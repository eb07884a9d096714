package cloudevent

import (
	"context"

	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/extensions"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowrun/flow/internal/tracing"
)

// The CloudEvents distributed-tracing extension's attributes and their NATS binary-mode
// headers ("ce-" and the attribute's name, as the SDK's NATS binding names extensions).
var (
	HeaderTraceParent = natsSpec.Prefix() + extensions.TraceParentExtension
	HeaderTraceState  = natsSpec.Prefix() + extensions.TraceStateExtension
)

// TraceExtension returns the distributed-tracing extension of the span ctx carries; TraceParent
// is "" when ctx carries no valid span context.
func TraceExtension(ctx context.Context) extensions.DistributedTracingExtension {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return extensions.DistributedTracingExtension{}
	}
	x := extensions.DistributedTracingExtension{TraceParent: tracing.Format(sc)}
	if sc.TraceState().Len() > 0 {
		x.TraceState = sc.TraceState().String()
	}
	return x
}

// SetTraceExtension records the span ctx carries in ec's extensions (traceparent, and tracestate
// when there is one), so that WriteHeaders writes ce-traceparent. A ctx without a valid span
// context leaves ec unchanged.
func SetTraceExtension(ctx context.Context, ec *ce.EventContextV1) {
	SetTraceParent(ec, TraceExtension(ctx))
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

// TraceFromHeaders returns the remote span context of a CloudEvent in NATS binary mode
// (ce-traceparent, ce-tracestate); ok is false when it carries none, or a malformed one.
func TraceFromHeaders(h nats.Header) (trace.SpanContext, bool) {
	if h == nil {
		return trace.SpanContext{}, false
	}
	return tracing.ParseWithState(first(h, HeaderTraceParent), first(h, HeaderTraceState))
}

// TraceFromEvent returns the remote span context of a decoded CloudEvent's distributed-tracing
// extension; ok is false when it has none.
func TraceFromEvent(ev *ce.Event) (trace.SpanContext, bool) {
	x, ok := extensions.GetDistributedTracingExtension(*ev)
	if !ok {
		return trace.SpanContext{}, false
	}
	return tracing.ParseWithState(x.TraceParent, x.TraceState)
}

// first reads header name without canonicalising it (nats.Header.Get canonicalises nothing
// either, but a missing key must not allocate).
func first(h nats.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}
