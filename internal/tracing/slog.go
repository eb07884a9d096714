package tracing

import (
	"context"
	"log/slog"
	"slices"

	"go.opentelemetry.io/otel/trace"
)

// Handler is a slog.Handler that adds, to every record whose context carries them, trace_id and
// span_id (of the context's span) and run_id (WithRunID), then hands the record to the wrapped
// handler. A record that already has a run_id attribute is not given a second one. Behind
// WithGroup the attributes land in the group, as every attribute of a record does.
type Handler struct {
	next slog.Handler
	// hasRunID is set once WithAttrs gave the handler a run_id of its own.
	hasRunID bool
}

// NewHandler wraps next.
func NewHandler(next slog.Handler) *Handler { return &Handler{next: next} }

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if ctx == nil {
		return h.next.Handle(ctx, r)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	if id := RunID(ctx); id != "" && !h.hasRunID && !recordHasRunID(r) {
		r.AddAttrs(slog.String("run_id", id))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	has := h.hasRunID || slices.ContainsFunc(attrs, func(a slog.Attr) bool { return a.Key == "run_id" })
	return &Handler{next: h.next.WithAttrs(attrs), hasRunID: has}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), hasRunID: h.hasRunID}
}

func recordHasRunID(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == "run_id"
		return !found
	})
	return found
}
