package bench

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// workloadOrder and metricOrder order the table's rows; names not listed follow, sorted.
var (
	workloadOrder = []string{"W1", "W2", "W3", "W3-10k", "W4", "W5", "W6", "W7", "W8", "ceiling-1", "ceiling-1000", "Q1", "update"}
	metricOrder   = []string{
		"p50_ms", "p99_ms", "wf_per_s", "events_per_s", "steps_per_s", "msgs_per_step", "history_msgs_per_step",
		"lateness_p50_ms", "lateness_p99_ms", "resume_lateness_p50_ms", "resume_lateness_p99_ms",
		"total_s", "first100_ms_per_step", "last100_ms_per_step", "ratio",
		"goroutines_idle", "goroutines_suspended", "heap_idle_mib", "heap_suspended_mib",
		"rss_idle_mib", "rss_suspended_mib", "nats_bytes_per_run", "appends_per_s", "fraction_of_ceiling",
		"handle_p50_ms", "handle_p99_ms", "step_p50_ms", "step_p99_ms", "updates_per_s",
	}
)

// rank orders s by its index in order, names not in order last.
func rank(order []string, s string) int {
	if i := slices.Index(order, s); i >= 0 {
		return i
	}
	return len(order)
}

// column is one system and variant of the table.
type column struct{ system, variant string }

func (c column) String() string { return strings.TrimSpace(c.system + " " + c.variant) }

// columns lists the systems and variants of results: Flow's first, then the others, each in
// the order they first appear.
func columns(results []Result) []column {
	var cols []column
	for _, r := range results {
		c := column{r.System, r.Variant}
		if !slices.Contains(cols, c) {
			cols = append(cols, c)
		}
	}
	slices.SortStableFunc(cols, func(a, b column) int {
		return cmp.Compare(boolInt(a.system != "flow"), boolInt(b.system != "flow"))
	})
	return cols
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// row is one line of the table: a workload's metric, or a process's resource.
type row struct {
	workload, metric string
	cells            map[column]string
}

// rows builds the table's rows: every metric of every workload, then the peak memory and CPU
// of each process, in workloadOrder and metricOrder.
func rows(results []Result) []row {
	type key struct{ workload, metric string }
	byKey := map[key]*row{}
	var keys []key
	cell := func(w, m string, c column, v string) {
		k := key{w, m}
		r, ok := byKey[k]
		if !ok {
			r = &row{workload: w, metric: m, cells: map[column]string{}}
			byKey[k] = r
			keys = append(keys, k)
		}
		r.cells[c] = v
	}
	for _, res := range results {
		c := column{res.System, res.Variant}
		if res.Error != "" {
			cell(res.Workload, "error", c, "failed: "+oneLine(res.Error))
		}
		for m, v := range res.Metrics {
			cell(res.Workload, m, c, formatValue(v))
		}
		for p, st := range res.Processes {
			peak := formatValue(st.PeakRSSMiB)
			if st.PeakSinceStart {
				peak += " (since start)"
			}
			cell(res.Workload, p+" peak_rss_mib", c, peak)
			if st.PeakPSSMiB > 0 {
				cell(res.Workload, p+" peak_pss_mib", c, formatValue(st.PeakPSSMiB))
			}
			cell(res.Workload, p+" cpu_s", c, formatValue(st.CPUSeconds))
		}
	}
	// Metrics in metricOrder, then each process's rows: nats, flow, then the others by name;
	// peak memory before CPU.
	metricKey := func(m string) (group int, process string, within int) {
		if m == "error" {
			return -1, "", 0
		}
		if p, res, ok := strings.Cut(m, " "); ok {
			return 1 + rank([]string{"nats", "flow"}, p), p, rank([]string{"peak_rss_mib", "peak_pss_mib", "cpu_s"}, res)
		}
		return 0, "", rank(metricOrder, m)
	}
	compareMetrics := func(a, b string) int {
		ga, pa, wa := metricKey(a)
		gb, pb, wb := metricKey(b)
		return cmp.Or(cmp.Compare(ga, gb), cmp.Compare(pa, pb), cmp.Compare(wa, wb), cmp.Compare(a, b))
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(
			cmp.Compare(rank(workloadOrder, a.workload), rank(workloadOrder, b.workload)),
			cmp.Compare(a.workload, b.workload),
			compareMetrics(a.metric, b.metric))
	})
	out := make([]row, len(keys))
	for i, k := range keys {
		out[i] = *byKey[k]
	}
	return out
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// formatValue prints about three significant digits, without exponents.
func formatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Sprint(v)
	case a >= 100 || v == 0:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a >= 0.01:
		return fmt.Sprintf("%.3f", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}

// WriteTable writes results as a Markdown table: a row per workload and metric (then each
// process's peak memory and CPU), a column per system and variant.
func WriteTable(w io.Writer, results []Result) error {
	cols := columns(results)
	head := []string{"workload", "metric"}
	for _, c := range cols {
		head = append(head, c.String())
	}
	lines := [][]string{head}
	for _, r := range rows(results) {
		line := []string{r.workload, r.metric}
		for _, c := range cols {
			line = append(line, cmp.Or(r.cells[c], "-"))
		}
		lines = append(lines, line)
	}
	width := make([]int, len(head))
	for _, l := range lines {
		for i, s := range l {
			width[i] = max(width[i], len(s))
		}
	}
	var b strings.Builder
	for n, l := range lines {
		b.WriteString("|")
		for i, s := range l {
			if i < 2 {
				fmt.Fprintf(&b, " %-*s |", width[i], s)
			} else {
				fmt.Fprintf(&b, " %*s |", width[i], s)
			}
		}
		b.WriteString("\n")
		if n == 0 {
			b.WriteString("|")
			for i := range l {
				if i < 2 {
					b.WriteString(strings.Repeat("-", width[i]+2) + "|")
				} else {
					b.WriteString(strings.Repeat("-", width[i]+1) + ":|")
				}
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
