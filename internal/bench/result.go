package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// File is a result file, as flowbench and the anchors harness (bench/anchors) write it: the
// schema of /work/perf-plan.md's "Result JSON".
type File struct {
	Started string   `json:"started"` // RFC 3339
	Quick   bool     `json:"quick"`
	Host    Host     `json:"host"`
	Results []Result `json:"results"`
}

// Host describes the machine and the tree measured.
type Host struct {
	CPUs   int    `json:"cpus"`
	Go     string `json:"go"`
	Commit string `json:"commit"`
}

// Result is one workload of one system and variant.
type Result struct {
	// System is flow, dbos-postgres or dbos-sqlite.
	System string `json:"system"`
	// Variant labels the configuration, e.g. "sync=default" or "sync=always".
	Variant string `json:"variant"`
	// Workload is W1..W8, W3-10k, ceiling-1 or ceiling-1000.
	Workload string `json:"workload"`
	// Metrics are the medians over the repetitions (plus metrics derived from them, such as
	// fraction_of_ceiling).
	Metrics map[string]float64 `json:"metrics"`
	// Reps are each repetition's metrics, in order.
	Reps []map[string]float64 `json:"reps,omitempty"`
	// Processes maps "nats", "flow" (or the anchors' processes) to their peak memory and CPU.
	Processes map[string]Process `json:"processes,omitempty"`
	// Error says why the workload has no metrics (a timeout, an engine error).
	Error string `json:"error,omitempty"`
}

// Process is one process's resources during a workload.
type Process struct {
	// PeakRSSMiB is the peak resident set (VmHWM) over the workload's repetitions.
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// CPUSeconds is user plus system CPU, the median over the repetitions.
	CPUSeconds float64 `json:"cpu_s"`
	// PeakPSSMiB is the peak proportional set size, where a harness measures it (the
	// anchors harness does, for processes sharing memory); flowbench does not.
	PeakPSSMiB float64 `json:"peak_pss_mib,omitempty"`
	// PeakSinceStart says the peak could not be reset before the workload: it is the peak
	// since the process started.
	PeakSinceStart bool `json:"peak_since_start,omitempty"`
}

// key identifies a result across files.
func (r Result) key() string { return r.System + "\x00" + r.Variant + "\x00" + r.Workload }

// ReadFile reads a result file.
func ReadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}

// WriteFile writes f as indented JSON, creating the directory.
func WriteFile(path string, f *File) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Merge returns base with the results of others added, in order. A result of the same system,
// variant and workload as an earlier one replaces it in place; replaced names those replaced.
// base's started, quick and host stay.
func Merge(base *File, others ...*File) (merged *File, replaced []string) {
	out := *base
	out.Results = append([]Result(nil), base.Results...)
	at := map[string]int{}
	for i, r := range out.Results {
		at[r.key()] = i
	}
	for _, f := range others {
		for _, r := range f.Results {
			if i, ok := at[r.key()]; ok {
				out.Results[i] = r
				replaced = append(replaced, r.System+" "+r.Variant+" "+r.Workload)
				continue
			}
			at[r.key()] = len(out.Results)
			out.Results = append(out.Results, r)
		}
	}
	return &out, replaced
}
