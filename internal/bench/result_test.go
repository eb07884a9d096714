package bench

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMerge(t *testing.T) {
	flow := func(variant, workload string, v float64) Result {
		return Result{System: "flow", Variant: variant, Workload: workload, Metrics: map[string]float64{"p50_ms": v}}
	}
	dbos := func(system, workload string, v float64) Result {
		return Result{System: system, Variant: "", Workload: workload, Metrics: map[string]float64{"p50_ms": v}}
	}
	base := &File{Started: "2026-01-01T00:00:00Z", Quick: true, Host: Host{CPUs: 2, Go: "go1.26.0", Commit: "abc"},
		Results: []Result{flow("sync=default", "W1", 1), flow("sync=always", "W1", 2)}}
	for _, tc := range []struct {
		name         string
		others       []*File
		want         []Result
		wantReplaced []string
	}{
		{"nothing to merge", nil, base.Results, nil},
		{"other systems follow in order",
			[]*File{{Results: []Result{dbos("dbos-postgres", "W1", 3)}}, {Results: []Result{dbos("dbos-sqlite", "W1", 4)}}},
			[]Result{flow("sync=default", "W1", 1), flow("sync=always", "W1", 2), dbos("dbos-postgres", "W1", 3), dbos("dbos-sqlite", "W1", 4)},
			nil},
		{"the same system, variant and workload replaces in place",
			[]*File{{Results: []Result{flow("sync=default", "W1", 9), flow("sync=default", "W2", 5)}}},
			[]Result{flow("sync=default", "W1", 9), flow("sync=always", "W1", 2), flow("sync=default", "W2", 5)},
			[]string{"flow sync=default W1"}},
		{"a later file replaces an earlier one",
			[]*File{{Results: []Result{dbos("dbos-sqlite", "W1", 4)}}, {Results: []Result{dbos("dbos-sqlite", "W1", 6)}}},
			[]Result{flow("sync=default", "W1", 1), flow("sync=always", "W1", 2), dbos("dbos-sqlite", "W1", 6)},
			[]string{"dbos-sqlite  W1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, replaced := Merge(base, tc.others...)
			require.Equal(t, tc.want, got.Results)
			require.Equal(t, tc.wantReplaced, replaced)
			require.Equal(t, base.Started, got.Started)
			require.Equal(t, base.Host, got.Host)
			require.True(t, got.Quick)
			require.Len(t, base.Results, 2, "Merge must not change base")
		})
	}
}

func TestFileRoundTrip(t *testing.T) {
	f := &File{Started: "2026-01-01T00:00:00Z", Host: Host{CPUs: 2, Go: "go1.26.0", Commit: "abc1234"},
		Results: []Result{{System: "flow", Variant: "sync=default", Workload: "W1",
			Metrics:   map[string]float64{"p50_ms": 2.1, "p99_ms": 4},
			Reps:      []map[string]float64{{"p50_ms": 2, "p99_ms": 3.9}},
			Processes: map[string]Process{"nats": {PeakRSSMiB: 120.5, CPUSeconds: 3.2}, "flow": {PeakRSSMiB: 60, CPUSeconds: 5.1}, "postgres": {PeakRSSMiB: 210, PeakPSSMiB: 63.8, CPUSeconds: 2.7}}}}}
	path := filepath.Join(t.TempDir(), "sub", "r.json")
	require.NoError(t, WriteFile(path, f))
	got, err := ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, f, got)
}
