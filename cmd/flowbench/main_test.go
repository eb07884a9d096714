package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/bench"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		check   func(t *testing.T, c *config)
		wantErr string
	}{
		{name: "defaults", check: func(t *testing.T, c *config) {
			require.Equal(t, listFlag{"default", "always"}, c.syncs)
			require.Empty(t, c.workloads)
			require.False(t, c.quick)
		}},
		{name: "lists by comma and repetition", args: []string{"-workloads", "W1, W2", "-workloads", "W7", "-anchors", "a.json,b.json", "-sync", "always"},
			check: func(t *testing.T, c *config) {
				require.Equal(t, listFlag{"W1", "W2", "W7"}, c.workloads)
				require.Equal(t, listFlag{"a.json", "b.json"}, c.anchors)
				require.Equal(t, listFlag{"always"}, c.syncs)
			}},
		{name: "sizes", args: []string{"-size", "W7=20000,W1=10"}, check: func(t *testing.T, c *config) {
			require.Equal(t, map[string]int{"W7": 20000, "W1": 10}, c.sizes)
		}},
		{name: "a size without a number", args: []string{"-size", "W7"}, wantErr: "want NAME=N"},
		{name: "stray argument", args: []string{"W1"}, wantErr: "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

// TestFrom reports a result file merged with an anchors file, without running anything.
func TestFrom(t *testing.T) {
	dir := t.TempDir()
	flowFile := filepath.Join(dir, "flow.json")
	anchors := filepath.Join(dir, "anchors.json")
	require.NoError(t, bench.WriteFile(flowFile, &bench.File{Started: "2026-01-01T00:00:00Z", Host: bench.Host{CPUs: 2, Go: "go1.26.0", Commit: "abc"},
		Results: []bench.Result{{System: "flow", Variant: "sync=default", Workload: "W1", Metrics: map[string]float64{"p50_ms": 2, "p99_ms": 4}},
			{System: "flow", Variant: "sync=default", Workload: "W2", Metrics: map[string]float64{"wf_per_s": 900}}}}))
	require.NoError(t, bench.WriteFile(anchors, &bench.File{Results: []bench.Result{
		{System: "dbos-sqlite", Workload: "W1", Metrics: map[string]float64{"p50_ms": 4.8, "p99_ms": 14.5}},
		{System: "dbos-sqlite", Workload: "W2", Metrics: map[string]float64{"wf_per_s": 155}}}}))
	out := filepath.Join(dir, "merged.json")
	chart := filepath.Join(dir, "chart.png")
	var stdout strings.Builder
	require.NoError(t, run([]string{"-from", flowFile, "-anchors", anchors, "-out", out, "-chart", chart}, &stdout, io.Discard))
	require.Contains(t, stdout.String(), "| flow sync=default | dbos-sqlite |")
	merged, err := bench.ReadFile(out)
	require.NoError(t, err)
	require.Len(t, merged.Results, 4)
	_, err = os.Stat(chart)
	require.NoError(t, err)
}
