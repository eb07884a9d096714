package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/fanout"
)

// clients is how many goroutines start runs, wait for results and send signals at once.
const clients = 64

// workload is one benchmark workload.
type workload struct {
	name string
	// full and quick are the sizes of a repetition (runs, steps or milliseconds, as run reads
	// rep.n); warm is the warm-up's, at most the repetition's.
	full, quick, warm int
	// once runs one repetition without a warm-up (the stack is warm from the workloads before).
	once bool
	// fullOnly skips the workload with Options.Quick.
	fullOnly bool
	// firstSyncOnly runs the workload under the first sync setting only: it brings its own
	// NATS server (long-run).
	firstSyncOnly bool
	// timeout bounds one repetition: past it the workload fails instead of hanging.
	timeout time.Duration
	run     func(r *rep) (map[string]float64, error)
}

func (w *workload) size(quick bool) int {
	if quick {
		return w.quick
	}
	return w.full
}

func (w *workload) warmSize(quick bool) int { return min(w.warm, w.size(quick)) }

// workloads in the order they run. W7 runs last: it leaves its runs suspended.
var workloads = []*workload{
	{name: "W1", full: 300, quick: 50, warm: 50, timeout: 2 * time.Minute, run: runW1},
	{name: "W2", full: 2000, quick: 300, warm: 300, timeout: 5 * time.Minute, run: runW2},
	{name: "W3", full: 1000, quick: 100, warm: 100, timeout: 3 * time.Minute, run: runW3},
	{name: "W3-10k", full: 10_000, once: true, fullOnly: true, timeout: 10 * time.Minute, run: runW3},
	{name: "W4", full: 500, quick: 200, warm: 200, timeout: 3 * time.Minute, run: runW4},
	{name: "W5", full: 500, quick: 100, warm: 100, timeout: 3 * time.Minute, run: runW5},
	{name: "W6", full: 10_000, quick: 1000, warm: 1000, timeout: 15 * time.Minute, run: runW6},
	{name: "W8", full: 1000, quick: 50, warm: 20, timeout: 10 * time.Minute, run: runW8},
	{name: "W9", full: 10_000, quick: 2000, warm: 1000, timeout: 3 * time.Minute, run: runW9},
	{name: "ceiling-1", full: 3000, quick: 500, warm: 500, timeout: time.Minute, run: runCeiling1},
	{name: "ceiling-1000", full: 3000, quick: 500, warm: 500, timeout: time.Minute, run: runCeiling1000},
	{name: "ceiling-batch", full: 4000, quick: 1000, warm: 1000, timeout: time.Minute, run: runCeilingBatch},
	{name: "Q1", full: 2000, quick: 500, warm: 200, timeout: 2 * time.Minute, run: runQ1},
	{name: "update", full: 2000, quick: 400, warm: 100, timeout: 3 * time.Minute, run: runUpdates},
	{name: "large-payload", full: 100, quick: 8, once: true, timeout: 10 * time.Minute, run: runLargePayload},
	{name: "long-run", full: 1_000_000, quick: 20_000, once: true, firstSyncOnly: true, timeout: 45 * time.Minute, run: runLongRun},
	{name: "W7", full: 100_000, quick: 2000, once: true, timeout: 30 * time.Minute, run: runW7},
}

// WorkloadNames lists the workloads in the order they run.
func WorkloadNames() []string {
	names := make([]string, len(workloads))
	for i, w := range workloads {
		names[i] = w.name
	}
	return names
}

// selectWorkloads returns the workloads named (all when none), in running order.
func selectWorkloads(names []string, quick bool) ([]*workload, error) {
	for _, n := range names {
		if !slices.ContainsFunc(workloads, func(w *workload) bool { return w.name == n }) {
			return nil, fmt.Errorf("unknown workload %q: choose from %s", n, strings.Join(WorkloadNames(), ", "))
		}
	}
	var sel []*workload
	for _, w := range workloads {
		switch {
		case len(names) > 0 && !slices.Contains(names, w.name):
		case len(names) == 0 && quick && w.fullOnly:
		default:
			sel = append(sel, w)
		}
	}
	return sel, nil
}

// parallel calls fn(0) .. fn(n-1) from clients goroutines and returns the first error; after an
// error or the end of ctx it calls fn no more.
func parallel(ctx context.Context, n int, fn func(i int) error) error {
	return fanout.Each(ctx, clients, n, fn)
}

// latest returns the latest of ts.
func latest(ts []time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}
