package bench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWriteTable(t *testing.T) {
	results := []Result{
		{System: "dbos-sqlite", Variant: "", Workload: "W1", Metrics: map[string]float64{"p99_ms": 14.5, "p50_ms": 4.8},
			Processes: map[string]Process{"postgres": {PeakRSSMiB: 210, PeakPSSMiB: 63.8, CPUSeconds: 2.7}, "dbos": {PeakRSSMiB: 20, CPUSeconds: 3.3}}},
		{System: "flow", Variant: "sync=default", Workload: "W2", Metrics: map[string]float64{"wf_per_s": 366.4},
			Processes: map[string]Process{"flow": {PeakRSSMiB: 125, CPUSeconds: 5.25}, "nats": {PeakRSSMiB: 221, CPUSeconds: 3.2, PeakSinceStart: true}}},
		{System: "flow", Variant: "sync=default", Workload: "W1", Metrics: map[string]float64{"p50_ms": 9.04, "p99_ms": 15.6}},
		{System: "flow", Variant: "sync=always", Workload: "W1", Error: "repetition 1: timed out"},
	}
	var b strings.Builder
	require.NoError(t, WriteTable(&b, results))
	want := `| workload | metric            | flow sync=default | flow sync=always | dbos-sqlite |
|----------|-------------------|------------------:|-----------------:|------------:|
| W1       | error             |                 - | failed: repetition 1: timed out |           - |
| W1       | p50_ms            |              9.04 |                - |        4.80 |
| W1       | p99_ms            |              15.6 |                - |        14.5 |
| W1       | dbos peak_rss_mib |                 - |                - |        20.0 |
| W1       | dbos cpu_s        |                 - |                - |        3.30 |
| W1       | postgres peak_rss_mib |             - |                - |         210 |
| W1       | postgres peak_pss_mib |             - |                - |        63.8 |
| W1       | postgres cpu_s    |                 - |                - |        2.70 |
| W2       | wf_per_s          |               366 |                - |           - |
| W2       | nats peak_rss_mib |   221 (since start) |                - |           - |
| W2       | nats cpu_s        |              3.20 |                - |           - |
| W2       | flow peak_rss_mib |               125 |                - |           - |
| W2       | flow cpu_s        |              5.25 |                - |           - |
`
	// Columns are as wide as their widest cell.
	require.Equal(t, normalise(want), normalise(b.String()))
}

// normalise drops the padding of a Markdown table, keeping its cells.
func normalise(table string) string {
	var out []string
	for line := range strings.Lines(table) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		for i, c := range cells {
			c = strings.TrimSpace(c)
			if strings.Trim(c, "-:") == "" && c != "" {
				c = "---"
			}
			cells[i] = c
		}
		out = append(out, strings.Join(cells, "|"))
	}
	return strings.Join(out, "\n")
}

func TestFormatValue(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0"}, {1234.5, "1234"}, {366.4, "366"}, {15.64, "15.6"}, {4.8, "4.80"}, {0.123, "0.123"},
		{0.004, "0.004"}, {0.0042, "0.0042"}, {-2.5, "-2.50"}, {100000, "100000"},
	} {
		require.Equal(t, tc.want, formatValue(tc.in), "formatValue(%v)", tc.in)
	}
}

func TestColumnsFlowFirst(t *testing.T) {
	got := columns([]Result{
		{System: "dbos-postgres", Workload: "W1"},
		{System: "flow", Variant: "sync=default", Workload: "W1"},
		{System: "dbos-sqlite", Workload: "W1"},
		{System: "flow", Variant: "sync=always", Workload: "W1"},
		{System: "flow", Variant: "sync=default", Workload: "W2"},
	})
	require.Equal(t, []column{{"flow", "sync=default"}, {"flow", "sync=always"}, {"dbos-postgres", ""}, {"dbos-sqlite", ""}}, got)
}
