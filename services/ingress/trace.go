package ingress

import (
	"context"
	"net/http"
	"strings"

	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/internal/tracing"
)

// Span names and attributes of the ingress (see docs/tracing.md). The span of an input is the
// parent of everything it causes: a start records it in run.started, so the run's whole trace
// hangs under it; a signal, hook delivery or cancel records it on its event, and the decision
// that answers the input links to it.
const (
	spanHTTP = "flow.ingress"
	spanNATS = "flow.ingress "

	attrKind  = attribute.Key("flow.input.kind")
	attrRunID = attribute.Key("flow.run_id")
)

var tracer = tracing.Tracer()

// traceHTTP wraps the ingress's HTTP handler in an OpenTelemetry server span per request to an
// API route, whose parent is the request's W3C traceparent header as the global propagator
// extracts it. Health and metrics requests are not traced.
func traceHTTP(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, spanHTTP, otelhttp.WithFilter(func(r *http.Request) bool {
		return strings.HasPrefix(r.URL.Path, "/v1/") && r.URL.Path != "/v1/openapi.json"
	}))
}

// tagHTTPSpan records the input kind on the request's span, which otelhttp names for the
// request's route ("POST /v1/runs/{run}/signals/{name}").
func tagHTTPSpan(r *http.Request, kind api.InputKind) {
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		span.SetAttributes(attrKind.String(string(kind)))
	}
}

// startNATSSpan starts the span of an input that arrived over NATS. Its parent is the
// message's trace context: the CloudEvents traceparent extension (ce-traceparent in binary
// mode, the event's traceparent attribute in structured mode), or a plain W3C traceparent header.
func startNATSSpan(ctx context.Context, m *nats.Msg, ev *ce.Event, kind api.InputKind) (context.Context, trace.Span) {
	sc, ok := cloudevent.TraceFromHeaders(m.Header)
	if !ok && ev != nil {
		sc, ok = cloudevent.TraceFromEvent(ev)
	}
	if !ok && m.Header != nil {
		sc, ok = tracing.ParseWithState(m.Header.Get("traceparent"), m.Header.Get("tracestate"))
	}
	if ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx, span := tracer.Start(ctx, spanNATS+string(kind), trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(attrKind.String(string(kind)), attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", m.Subject))
	}
	return ctx, span
}

// endSpan records an input's outcome on the span ctx carries.
func endSpan(ctx context.Context, resp *api.InputResponse, e *api.IngressError) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if resp != nil && resp.RunID != "" {
		span.SetAttributes(attrRunID.String(resp.RunID))
	}
	if e != nil {
		span.SetStatus(codes.Error, string(e.Code)+": "+e.Message)
	}
}
