// Package bench is Flow's benchmark harness (cmd/flowbench, `make bench`): the workloads of
// docs/performance.md, run through the public SDK against NATS as a separate process (or
// embedded), under both JetStream fsync settings, with their results as a table, a JSON file in
// the shared result schema (File) and a chart.
package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// Options configure Run.
type Options struct {
	// Quick runs the small sizes.
	Quick bool
	// Syncs are the JetStream fsync settings to run under: "default" (the server's) and
	// "always"; each gets a fresh NATS server and Flow stack.
	Syncs []string
	// Embedded runs NATS inside this process instead of as a nats-server process.
	Embedded bool
	// Replicas, above 1, runs a cluster of that many nats-server processes on this machine,
	// with every Flow stream and bucket replicated on all of them (not with Embedded).
	Replicas int
	// Partitions, above 1, spreads the history over that many streams
	// (streams.Config.Partitions), and the ceilings' appends over as many streams.
	Partitions int
	// PartitionCounts, when set, runs every sync setting once per count, each with a fresh
	// NATS server and Flow stack, in this order, instead of with Partitions alone: the
	// partitions compared in one run.
	PartitionCounts []int
	// SerialCommits runs the worker with serial commits (services/worker.Config.SerialCommits)
	// instead of the default pipeline, for comparing the two.
	SerialCommits bool
	// EagerStart runs the ingress with eager start (services/ingress.Config.EagerStart), for
	// comparing with the default.
	EagerStart bool
	// NATSServer is the nats-server binary (required unless Embedded).
	NATSServer string
	// Workloads selects workloads by name; empty runs all of them (W3-10k only when not
	// Quick).
	Workloads []string
	// Sizes overrides the size of a repetition (runs, steps or milliseconds) by workload
	// name; the warm-up stays at most as large.
	Sizes map[string]int
	// CPUProfileDir and MemProfileDir, when set, receive a CPU profile of the timed
	// repetitions and a heap profile after them, per sync setting and workload, of this
	// process (Flow's services and the client; with Embedded, NATS too).
	CPUProfileDir, MemProfileDir string
	// Logger receives progress; ServiceLogger is given to Flow's services.
	Logger, ServiceLogger *slog.Logger
}

// Variant returns the result variant of a sync setting under opts.
func Variant(sync string, opts Options) string {
	v := "sync=" + sync
	if opts.Embedded {
		v += ",nats=embedded"
	}
	if opts.Replicas > 1 {
		v += fmt.Sprintf(",R%d", opts.Replicas)
	}
	if opts.Partitions > 1 {
		v += fmt.Sprintf(",P%d", opts.Partitions)
	}
	if opts.SerialCommits {
		v += ",serial"
	}
	if opts.EagerStart {
		v += ",eager"
	}
	return v
}

// Run runs the selected workloads under every sync setting and returns their results, one per
// sync setting and workload, in order. A workload that fails or times out has a Result with
// Error set; Run goes on with the next one and returns an error naming the failures.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	sel, err := selectWorkloads(opts.Workloads, opts.Quick)
	if err != nil {
		return nil, err
	}
	for name, n := range opts.Sizes {
		if !slices.Contains(WorkloadNames(), name) || n <= 0 {
			return nil, fmt.Errorf("size %s=%d: name a workload and a positive size", name, n)
		}
	}
	var results []Result
	var failed []string
	counts := opts.PartitionCounts
	if len(counts) == 0 {
		counts = []int{opts.Partitions}
	}
	for _, sync := range opts.Syncs {
		if sync != "default" && sync != "always" {
			return results, fmt.Errorf("unknown sync setting %q: use default or always", sync)
		}
		for _, parts := range counts {
			o := opts
			o.Partitions = parts
			rs, err := runSync(ctx, o, sync, sel)
			results = append(results, rs...)
			for _, r := range rs {
				if r.Error != "" {
					failed = append(failed, r.Variant+" "+r.Workload)
				}
			}
			if err != nil {
				return results, err
			}
		}
	}
	addFractionOfCeiling(results)
	if len(failed) > 0 {
		return results, fmt.Errorf("%d workloads failed: %s", len(failed), strings.Join(failed, ", "))
	}
	return results, nil
}

// runSync starts a NATS server and a Flow stack with fsync setting sync, runs the workloads on
// them, and stops both.
func runSync(ctx context.Context, opts Options, sync string, sel []*workload) (_ []Result, err error) {
	variant := Variant(sync, opts)
	server := ""
	if sync == "always" {
		server = "always"
	}
	log := opts.Logger.With(slog.String("variant", variant))
	var ns natsServer
	switch {
	case opts.Embedded:
		ns, err = startEmbeddedNATS(server)
	case opts.Replicas > 1:
		ns, err = startNATSCluster(ctx, opts.NATSServer, server, opts.Replicas)
	default:
		ns, err = startNATSProcess(ctx, opts.NATSServer, server)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: starting NATS: %w", variant, err)
	}
	defer func() { err = errors.Join(err, ns.Stop()) }()
	st, err := startStack(ctx, ns, opts, opts.ServiceLogger)
	if err != nil {
		return nil, fmt.Errorf("%s: starting Flow: %w", variant, err)
	}
	defer func() { err = errors.Join(err, st.stop()) }()
	procs := []*watched{{name: "flow", pid: os.Getpid()}}
	for i, pid := range slices.Backward(ns.PIDs()) {
		name := "nats"
		if i > 0 {
			name = fmt.Sprintf("nats-%d", i+1)
		}
		procs = append([]*watched{{name: name, pid: pid}}, procs...)
	}
	var results []Result
	for _, w := range sel {
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		if w.firstSyncOnly && sync != opts.Syncs[0] {
			continue
		}
		log.Info("workload", slog.String("workload", w.name))
		t0 := time.Now()
		r := runWorkload(ctx, opts, st, w, variant, procs)
		if r.Error != "" {
			log.Error("workload failed", slog.String("workload", w.name), slog.String("error", r.Error))
		} else {
			log.Info("workload done", slog.String("workload", w.name), slog.Duration("took", time.Since(t0).Round(time.Millisecond)),
				slog.String("metrics", formatMetrics(r.Metrics)))
		}
		results = append(results, r)
	}
	return results, nil
}

// runWorkload runs w's warm-up and repetitions on st.
func runWorkload(ctx context.Context, opts Options, st *stack, w *workload, variant string, procs []*watched) Result {
	res := Result{System: "flow", Variant: variant, Workload: w.name}
	size, warm := w.size(opts.Quick), w.warmSize(opts.Quick)
	if n, ok := opts.Sizes[w.name]; ok {
		size, warm = n, min(warm, n)
	}
	if !w.once {
		if _, _, err := w.runRep(ctx, st, warm, opts.Quick, procs); err != nil {
			res.Error = "warm-up: " + err.Error()
			return res
		}
	}
	for _, p := range procs {
		p.peakSinceStart = false
		p.reset()
	}
	stopProfile := startCPUProfile(opts.CPUProfileDir, variant, w.name)
	reps := 3
	if w.once {
		reps = 1
	}
	cpu := map[string][]float64{}
	for i := range reps {
		m, used, err := w.runRep(ctx, st, size, opts.Quick, procs)
		if err != nil {
			res.Error = fmt.Sprintf("repetition %d: %v", i+1, err)
			break
		}
		res.Reps = append(res.Reps, m)
		for name, secs := range used {
			cpu[name] = append(cpu[name], secs)
		}
	}
	stopProfile()
	writeHeapProfile(opts.MemProfileDir, variant, w.name)
	res.Metrics = medians(res.Reps)
	res.Processes = map[string]Process{}
	for _, p := range procs {
		mem, err := readMem(p.pid)
		if err != nil {
			continue
		}
		res.Processes[p.name] = Process{PeakRSSMiB: mib(mem.HWM), CPUSeconds: median(cpu[p.name]), PeakSinceStart: p.peakSinceStart}
	}
	return res
}

// runRep runs one repetition of size n within w's timeout. It returns its metrics and each
// process's CPU seconds over the repetition's timed part.
func (w *workload) runRep(ctx context.Context, st *stack, n int, quick bool, procs []*watched) (map[string]float64, map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	r := &rep{ctx: ctx, st: st, n: n, quick: quick, procs: procs}
	start := r.cpuNow()
	m, err := w.run(r)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("timed out after %s (%s at size %d): %w", w.timeout, w.name, n, err)
		}
		return nil, nil, err
	}
	end := r.cpuNow()
	if r.begun != nil {
		start = r.begun
	}
	if r.ended != nil {
		end = r.ended
	}
	used := map[string]float64{}
	for name, v := range end {
		used[name] = v - start[name]
	}
	return m, used, nil
}

// rep is one repetition of a workload.
type rep struct {
	ctx   context.Context
	st    *stack
	n     int // the workload's size: runs, steps or seconds, as the workload defines it
	quick bool

	procs        []*watched
	begun, ended map[string]float64
	// ceilingParts is the number of ceiling streams ceilingStreamFor made.
	ceilingParts int
}

// begin and end bracket the timed part of a repetition, for its CPU seconds; without them the
// whole repetition counts.
func (r *rep) begin() { r.begun = r.cpuNow() }
func (r *rep) end()   { r.ended = r.cpuNow() }

func (r *rep) cpuNow() map[string]float64 {
	out := map[string]float64{}
	for _, p := range r.procs {
		if s, err := cpuSeconds(p.pid); err == nil {
			out[p.name] = s
		}
	}
	return out
}

func fileStem(variant, workload string) string {
	return strings.NewReplacer("=", "-", ",", "_").Replace(variant) + "_" + workload
}

func startCPUProfile(dir, variant, workload string) func() {
	if dir == "" {
		return func() {}
	}
	f, err := createIn(dir, fileStem(variant, workload)+".cpu.pprof")
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		slog.Error("cpu profile", slog.String("error", err.Error()))
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

func writeHeapProfile(dir, variant, workload string) {
	if dir == "" {
		return
	}
	f, err := createIn(dir, fileStem(variant, workload)+".heap.pprof")
	if err == nil {
		runtime.GC()
		err = errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
	}
	if err != nil {
		slog.Error("heap profile", slog.String("error", err.Error()))
	}
}

func createIn(dir, name string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return os.Create(filepath.Join(dir, name))
}

// addFractionOfCeiling sets W2's fraction_of_ceiling: its events_per_s over the ceiling-1000
// appends_per_s of the same variant.
func addFractionOfCeiling(results []Result) {
	for i := range results {
		w2 := &results[i]
		if w2.System != "flow" || w2.Workload != "W2" || w2.Error != "" {
			continue
		}
		j := slices.IndexFunc(results, func(r Result) bool {
			return r.System == w2.System && r.Variant == w2.Variant && r.Workload == "ceiling-1000" && r.Error == ""
		})
		if j < 0 || results[j].Metrics["appends_per_s"] == 0 {
			continue
		}
		w2.Metrics["fraction_of_ceiling"] = w2.Metrics["events_per_s"] / results[j].Metrics["appends_per_s"]
	}
}

func formatMetrics(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return rank(metricOrder, a) - rank(metricOrder, b) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + formatValue(m[k])
	}
	return strings.Join(parts, " ")
}
