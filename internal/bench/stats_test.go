package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want float64
	}{
		{"none", nil, 0},
		{"one", []float64{3}, 3},
		{"odd", []float64{5, 1, 3}, 3},
		{"even", []float64{4, 1, 3, 2}, 2.5},
		{"repeated", []float64{2, 2, 9}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]float64(nil), tc.in...)
			require.Equal(t, tc.want, median(in))
			require.Equal(t, tc.in, in, "median must not reorder its input")
		})
	}
}

func TestQuantile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	for _, tc := range []struct {
		name   string
		sorted []float64
		q      float64
		want   float64
	}{
		{"none", nil, 0.5, 0},
		{"one", []float64{7}, 0.99, 7},
		{"p50 of 100", hundred, 0.50, 50},
		{"p99 of 100", hundred, 0.99, 99},
		{"p100", hundred, 1, 100},
		{"p0 is the minimum", hundred, 0, 1},
		{"p99 of 3 is the maximum", []float64{1, 2, 3}, 0.99, 3},
		{"p50 of 4 by nearest rank", []float64{1, 2, 3, 4}, 0.5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, quantile(tc.sorted, tc.q))
		})
	}
}

func TestLatencies(t *testing.T) {
	ds := []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}
	require.Equal(t, map[string]float64{"lateness_p50_ms": 2, "lateness_p99_ms": 3}, latencies("lateness_", ds))
}

func TestMedians(t *testing.T) {
	got := medians([]map[string]float64{
		{"p50_ms": 1, "p99_ms": 10},
		{"p50_ms": 3, "p99_ms": 30},
		{"p50_ms": 2}, // a metric a repetition lacks is the median of the others
	})
	require.Equal(t, map[string]float64{"p50_ms": 2, "p99_ms": 20}, got)
}
