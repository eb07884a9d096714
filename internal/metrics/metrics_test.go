package metrics_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/flowrun/flow/internal/metrics"
)

var reader = sdkmetric.NewManualReader()

// TestMain sets the global MeterProvider after the package's instruments were made, as a
// program does: they delegate to it.
func TestMain(m *testing.M) {
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	os.Exit(m.Run())
}

func collect(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, metrics.Name, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func sumOf(t *testing.T, data metricdata.Aggregation, kv ...attribute.KeyValue) int64 {
	t.Helper()
	want := attribute.NewSet(kv...)
	for _, dp := range data.(metricdata.Sum[int64]).DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	return 0
}

func TestInstruments(t *testing.T) {
	ctx := context.Background()
	metrics.Decision(ctx, "step.scheduled")
	metrics.Decision(ctx, "step.scheduled")
	metrics.Decision(ctx, "run.completed")
	metrics.Append(ctx)
	metrics.Conflict(ctx)
	metrics.CacheHit(ctx)
	metrics.CacheMiss(ctx)
	metrics.CacheMiss(ctx)
	metrics.StepAttempt(ctx, "chargePayment", metrics.OutcomeError, 0.02)
	metrics.StepAttempt(ctx, "chargePayment", metrics.OutcomeOK, 0.01)
	metrics.TimerLateness(ctx, "wait", 0.003)
	stopBacklog, err := metrics.ObserveTaskBacklog(func(context.Context) []metrics.Backlog {
		return []metrics.Backlog{{Queue: "default", Consumer: "tasks-default", Pending: 7}}
	})
	require.NoError(t, err)
	defer stopBacklog()
	stopBlocked, err := metrics.ObserveBlockedRuns(func() int64 { return 2 })
	require.NoError(t, err)

	got := collect(t)
	require.Equal(t, int64(2), sumOf(t, got[metrics.DecisionsName], metrics.KeyKind.String("step.scheduled")))
	require.Equal(t, int64(1), sumOf(t, got[metrics.DecisionsName], metrics.KeyKind.String("run.completed")))
	require.Equal(t, int64(1), sumOf(t, got[metrics.AppendsName]))
	require.Equal(t, int64(1), sumOf(t, got[metrics.ConflictsName]))
	require.Equal(t, int64(1), sumOf(t, got[metrics.CacheLookupsName], metrics.KeyResult.String("hit")))
	require.Equal(t, int64(2), sumOf(t, got[metrics.CacheLookupsName], metrics.KeyResult.String("miss")))

	steps := got[metrics.StepDurationName].(metricdata.Histogram[float64]).DataPoints
	require.Len(t, steps, 2)
	for _, dp := range steps {
		name, _ := dp.Attributes.Value(metrics.KeyStep)
		require.Equal(t, "chargePayment", name.AsString())
		require.Equal(t, uint64(1), dp.Count)
	}
	late := got[metrics.TimerLatenessName].(metricdata.Histogram[float64]).DataPoints
	require.Len(t, late, 1)
	require.InDelta(t, 0.003, late[0].Sum, 1e-9)

	backlog := got[metrics.TaskBacklogName].(metricdata.Gauge[int64]).DataPoints
	require.Len(t, backlog, 1)
	require.Equal(t, int64(7), backlog[0].Value)
	blocked := got[metrics.BlockedRunsName].(metricdata.Gauge[int64]).DataPoints
	require.Len(t, blocked, 1)
	require.Equal(t, int64(2), blocked[0].Value)

	stopBlocked()
	_, still := collect(t)[metrics.BlockedRunsName]
	require.False(t, still, "an unregistered gauge is no longer observed")
}
