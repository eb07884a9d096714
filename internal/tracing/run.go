package tracing

import "context"

type runKey struct{}

// WithRunID returns ctx carrying run ID runID, which the slog handler adds to records as run_id.
func WithRunID(ctx context.Context, runID string) context.Context {
	return context.WithValue(ctx, runKey{}, runID)
}

// RunID returns the run ID ctx carries, or "".
func RunID(ctx context.Context) string {
	id, _ := ctx.Value(runKey{}).(string)
	return id
}
