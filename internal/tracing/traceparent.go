package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// w3c is the W3C Trace Context format, which the traceparent extension and the recorded
// traceparent fields use whatever propagator the program configured.
var w3c propagation.TraceContext

// carrier is a propagation.TextMapCarrier over the two W3C fields, without a map.
type carrier struct{ parent, state string }

func (c *carrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.parent = value
	case "tracestate":
		c.state = value
	}
}

func (c *carrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// TraceParent returns the W3C traceparent of the span ctx carries ("00-<trace>-<span>-<flags>"),
// or "" when ctx carries no valid span context.
func TraceParent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return Format(sc)
}

// Format returns the W3C traceparent of sc, or "" for an invalid one.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var c carrier
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), &c)
	return c.parent
}

// Parse returns the remote span context a W3C traceparent names; ok is false for "" or a
// malformed value.
func Parse(traceparent string) (trace.SpanContext, bool) {
	return ParseWithState(traceparent, "")
}

// ParseWithState is Parse with a W3C tracestate.
func ParseWithState(traceparent, tracestate string) (trace.SpanContext, bool) {
	if traceparent == "" {
		return trace.SpanContext{}, false
	}
	c := carrier{parent: traceparent, state: tracestate}
	sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), &c))
	return sc, sc.IsValid()
}

// WithRemote returns ctx carrying the remote span context traceparent names as its parent, or
// ctx unchanged when traceparent is "" or malformed.
func WithRemote(ctx context.Context, traceparent string) context.Context {
	if sc, ok := Parse(traceparent); ok {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

// Link returns a span link to the span traceparent names; ok is false when it names none.
func Link(traceparent string) (trace.Link, bool) {
	sc, ok := Parse(traceparent)
	if !ok {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc}, true
}
