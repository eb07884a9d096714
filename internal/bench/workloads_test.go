package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func names(ws []*workload) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.name
	}
	return out
}

func TestSelectWorkloads(t *testing.T) {
	all := WorkloadNames()
	require.Equal(t, "W7", all[len(all)-1], "W7 leaves its runs suspended: it runs last")
	for _, tc := range []struct {
		name    string
		in      []string
		quick   bool
		want    []string
		wantErr string
	}{
		{name: "all", want: all},
		{name: "quick skips W3-10k", quick: true, want: without(all, "W3-10k")},
		{name: "running order, not the order asked", in: []string{"W7", "W2", "W1"}, want: []string{"W1", "W2", "W7"}},
		{name: "asked for, W3-10k runs in quick mode", in: []string{"W3-10k"}, quick: true, want: []string{"W3-10k"}},
		{name: "unknown", in: []string{"W99"}, wantErr: `unknown workload "W99"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := selectWorkloads(tc.in, tc.quick)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, names(got))
		})
	}
}

func without(xs []string, x string) []string {
	var out []string
	for _, v := range xs {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}

func TestWorkloadSizes(t *testing.T) {
	for _, w := range workloads {
		require.Positive(t, w.full, w.name)
		require.LessOrEqual(t, w.warmSize(false), w.full, w.name)
		if !w.fullOnly {
			require.Positive(t, w.quick, w.name)
			require.LessOrEqual(t, w.quick, w.full, w.name)
		}
		if !w.once {
			require.Positive(t, w.warm, w.name)
		}
		require.Positive(t, w.timeout, w.name)
	}
}

func TestAddFractionOfCeiling(t *testing.T) {
	results := []Result{
		{System: "flow", Variant: "sync=default", Workload: "W2", Metrics: map[string]float64{"events_per_s": 5000}},
		{System: "flow", Variant: "sync=always", Workload: "W2", Metrics: map[string]float64{"events_per_s": 1000}},
		{System: "flow", Variant: "sync=default", Workload: "ceiling-1000", Metrics: map[string]float64{"appends_per_s": 20000}},
	}
	addFractionOfCeiling(results)
	require.Equal(t, 0.25, results[0].Metrics["fraction_of_ceiling"])
	require.NotContains(t, results[1].Metrics, "fraction_of_ceiling", "no ceiling measured for sync=always")
}
