// Package tracing holds Flow's OpenTelemetry span helpers: the tracer every component uses, the
// W3C traceparent of a span context in text form (as run.started and the inputs record it), the
// run ID a context carries, and a slog handler that adds trace_id, span_id and run_id from the
// context to every record.
//
// It imports no transport: the CloudEvents distributed-tracing extension that carries trace
// context across processes on NATS (ce-traceparent, ce-tracestate) is written and read by
// package cloudevent, on top of Format and ParseWithState, so that importing tracing (as the
// engine does) brings in neither nats.go nor the CloudEvents SDK.
//
// It uses only the global providers (otel.Tracer, otel.GetTextMapPropagator is not needed: the
// traceparent is W3C trace context by definition), so it works whether or not the program
// configured OpenTelemetry; without a configured provider every span is a no-op.
//
// The trace model is described in docs/tracing.md.
package tracing
