package tracing

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/trace"
)

// A W3C traceparent is "<version>-<trace ID>-<parent ID>-<flags>" in lowercase hex:
// "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01". Flow writes version 00, and reads
// any version but ff whose first four fields are those of version 00 (later versions may append
// fields after a '-'), as the W3C Trace Context recommendation asks. Parsing and formatting are
// done here, not through a propagator: they are on the path of every commit and task.
const traceParentLen = 55

// TraceParent returns the W3C traceparent of the span ctx carries, or "" when ctx carries no
// valid span context.
func TraceParent(ctx context.Context) string {
	return Format(trace.SpanContextFromContext(ctx))
}

// Format returns the W3C traceparent of sc, or "" for an invalid one.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [traceParentLen]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	flags := [1]byte{byte(sc.TraceFlags() & trace.FlagsSampled)}
	hex.Encode(b[53:55], flags[:])
	return string(b[:])
}

// Parse returns the remote span context a W3C traceparent names; ok is false for "" or a
// malformed value.
func Parse(traceparent string) (trace.SpanContext, bool) {
	s := traceparent
	if len(s) < traceParentLen || s[2] != '-' || s[35] != '-' || s[52] != '-' || len(s) > traceParentLen && s[traceParentLen] != '-' {
		return trace.SpanContext{}, false
	}
	var version, flags [1]byte
	var tid trace.TraceID
	var sid trace.SpanID
	if !decodeLower(version[:], s[0:2]) || version[0] == 0xff || version[0] == 0 && len(s) != traceParentLen ||
		!decodeLower(tid[:], s[3:35]) || !decodeLower(sid[:], s[36:52]) || !decodeLower(flags[:], s[53:55]) {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// decodeLower decodes lowercase hex src into dst, which is len(src)/2 long.
func decodeLower(dst []byte, src string) bool {
	for i := 0; i < len(dst); i++ {
		hi, ok1 := nibble(src[2*i])
		lo, ok2 := nibble(src[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func nibble(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// ParseWithState is Parse with a W3C tracestate; a malformed tracestate is dropped.
func ParseWithState(traceparent, tracestate string) (trace.SpanContext, bool) {
	sc, ok := Parse(traceparent)
	if !ok || tracestate == "" {
		return sc, ok
	}
	if ts, err := trace.ParseTraceState(tracestate); err == nil {
		sc = sc.WithTraceState(ts)
	}
	return sc, true
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
