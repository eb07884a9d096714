package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// metrics maps a metric name of the shared plan (p50_ms, wf_per_s, ...) to its value.
type metrics map[string]float64

// procStats is one process's (or a group of processes') peak resident memory over a workload's
// repetitions and the median of its CPU seconds per repetition; PeakPssMiB only for a group
// (see procGroup).
type procStats struct {
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	CPUs       float64 `json:"cpu_s"`
	PeakPssMiB float64 `json:"peak_pss_mib,omitempty"`
}

// result is one (system, variant, workload) entry of the shared result file.
type result struct {
	System    string               `json:"system"`
	Variant   string               `json:"variant"`
	Workload  string               `json:"workload"`
	Metrics   metrics              `json:"metrics"`
	Reps      []metrics            `json:"reps"`
	Processes map[string]procStats `json:"processes"`
}

type hostInfo struct {
	CPUs   int    `json:"cpus"`
	Go     string `json:"go"`
	Commit string `json:"commit"`
}

// report is the whole result file, in the schema of the shared plan.
type report struct {
	Started string   `json:"started"`
	Quick   bool     `json:"quick"`
	Host    hostInfo `json:"host"`
	Results []result `json:"results"`
}

// write stores the report at path; a run that stops midway leaves the workloads it finished.
func (r *report) write(path string) error {
	if path == "" {
		return nil
	}
	return writeJSON(path, r)
}

// writeJSON stores v at path atomically (temporary file, then rename), so a reader never sees
// half a file.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// medians returns, for every metric present in all reps, the median over the reps.
func medians(reps []metrics) metrics {
	out := metrics{}
	if len(reps) == 0 {
		return out
	}
	for name := range reps[0] {
		vals := make([]float64, 0, len(reps))
		for _, m := range reps {
			if v, ok := m[name]; ok {
				vals = append(vals, v)
			}
		}
		if len(vals) == len(reps) {
			out[name] = median(vals)
		}
	}
	return out
}

func median(vals []float64) float64 {
	s := slices.Clone(vals)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentileMs returns the nearest-rank p-th percentile (0 < p <= 1) of ds in milliseconds.
func percentileMs(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return math.NaN()
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	i = max(0, min(i, len(s)-1))
	return ms(s[i])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// round keeps three significant decimals for the table and the file.
func round(v float64) float64 {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return v
	case math.Abs(v) >= 100:
		return math.Round(v*10) / 10
	default:
		return math.Round(v*1000) / 1000
	}
}

// table renders the medians of the results, one line per (system, workload).
func table(results []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-14s %-8s %s\n", "system", "workload", "medians")
	for _, r := range results {
		names := make([]string, 0, len(r.Metrics))
		for n := range r.Metrics {
			names = append(names, n)
		}
		sort.Strings(names)
		parts := make([]string, 0, len(names)+len(r.Processes))
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s=%g", n, r.Metrics[n]))
		}
		procs := make([]string, 0, len(r.Processes))
		for p := range r.Processes {
			procs = append(procs, p)
		}
		sort.Strings(procs)
		for _, p := range procs {
			ps := r.Processes[p]
			mem := fmt.Sprintf("%gMiB", ps.PeakRSSMiB)
			if ps.PeakPssMiB > 0 {
				mem += fmt.Sprintf("(pss %g)", ps.PeakPssMiB)
			}
			parts = append(parts, fmt.Sprintf("%s=%s/%gs", p, mem, ps.CPUs))
		}
		fmt.Fprintf(&b, "%-14s %-8s %s\n", r.System, r.Workload, strings.Join(parts, " "))
	}
	return b.String()
}
