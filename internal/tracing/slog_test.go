package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/internal/tracing/tracetest"
)

func logged(t *testing.T, log func(*slog.Logger)) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	log(slog.New(tracing.NewHandler(slog.NewJSONHandler(&buf, nil))))
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), "%s", buf.Bytes())
	return rec
}

func TestHandlerAddsTraceAndRun(t *testing.T) {
	ctx, sc := tracetest.Remote(t)
	ctx = tracing.WithRunID(ctx, "order-1")
	rec := logged(t, func(l *slog.Logger) { l.InfoContext(ctx, "decided") })
	require.Equal(t, sc.TraceID().String(), rec["trace_id"])
	require.Equal(t, sc.SpanID().String(), rec["span_id"])
	require.Equal(t, "order-1", rec["run_id"])

	rec = logged(t, func(l *slog.Logger) { l.Info("no context") })
	require.NotContains(t, rec, "trace_id")
	require.NotContains(t, rec, "run_id")
}

// A record or logger that names its run already is not given a second run_id.
func TestHandlerKeepsOneRunID(t *testing.T) {
	ctx := tracing.WithRunID(context.Background(), "order-1")
	var buf bytes.Buffer
	l := slog.New(tracing.NewHandler(slog.NewJSONHandler(&buf, nil)))
	l.InfoContext(ctx, "step failed", slog.String("run_id", "order-1"))
	l.With(slog.String("run_id", "order-1")).InfoContext(ctx, "again")
	l.WithGroup("g").InfoContext(ctx, "grouped")
	require.Equal(t, 3, bytes.Count(buf.Bytes(), []byte(`"run_id"`)), "%s", buf.Bytes())
}
