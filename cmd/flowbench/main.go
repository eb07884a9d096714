// Command flowbench is Flow's benchmark (`make bench`): workloads W1..W8, W3-10k and the
// JetStream ceiling (docs/performance.md), run through the public SDK against a nats-server
// process started per JetStream sync setting, with Flow's services and the client in this
// process. It prints a table of medians, writes a JSON result file and a chart, and merges the
// result files of other systems (bench/anchors) into both.
//
//	go run ./cmd/flowbench [-quick] [-sync default,always] [-embedded] [-workloads W1,W2]
//	    [-out FILE.json] [-anchors FILE.json,...] [-chart FILE.png]
//	    [-cpuprofile DIR] [-memprofile DIR] [-nats-server BIN] [-size W7=20000] [-from FILE.json]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/bench"
)

// listFlag collects comma-separated values over repeated uses.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

type config struct {
	quick, embedded, serial, eager bool
	syncs, workloads, anchors      listFlag
	out, chart, from               string
	cpuProfile, memProfile         string
	natsServer                     string
	serviceLog                     string
	sizes                          map[string]int
	replicas                       int
	partitions                     []int
	project                        []int
	projectCores                   int
	projectVariant                 string
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "flowbench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("flowbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&c.quick, "quick", false, "small sizes (under a minute with -sync default)")
	fs.Var(&c.syncs, "sync", "JetStream fsync settings to run under, comma-separated: default, always (default both)")
	fs.BoolVar(&c.embedded, "embedded", false, "run NATS inside this process instead of as a nats-server process")
	fs.BoolVar(&c.serial, "serial-commits", false, "run the worker with serial commits instead of pipelined ones (variant label ',serial')")
	fs.BoolVar(&c.eager, "eager", false, "run the ingress with eager start (variant label ',eager')")
	fs.IntVar(&c.replicas, "replicas", 1, "above 1: run a cluster of that many nats-server processes, Flow's streams replicated on all")
	var project listFlag
	fs.Var(&project, "project", "after the table, project W2 on clusters of these node counts, comma-separated: 3,5,9 (docs/performance.md); needs W2 and ceiling-1000 of -project-variant")
	fs.IntVar(&c.projectCores, "project-cores", 8, "cores per node of -project's clusters")
	fs.StringVar(&c.projectVariant, "project-variant", "sync=default,R3,P3", "the measured variant -project starts from")
	var partitions listFlag
	fs.Var(&partitions, "partitions", "history streams (FLOW_STREAMS_PARTITIONS), comma-separated to run each in turn: 1,3 (variant label ',P<n>' above 1; default 1)")
	fs.Var(&c.workloads, "workloads", "workloads to run, comma-separated (default all): "+strings.Join(bench.WorkloadNames(), ","))
	fs.StringVar(&c.out, "out", "", "result file (default bench-results/<start time>.json)")
	fs.Var(&c.anchors, "anchors", "result files of other systems to merge, comma-separated or repeated")
	fs.StringVar(&c.chart, "chart", "", "PNG chart of W1 and W2 (default the result file's path with .png)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "directory for a CPU profile of this process per sync setting and workload")
	fs.StringVar(&c.memProfile, "memprofile", "", "directory for a heap profile of this process per sync setting and workload")
	fs.StringVar(&c.natsServer, "nats-server", "", "nats-server binary (default: build bin/nats-server at go.mod's version)")
	fs.StringVar(&c.from, "from", "", "run nothing: report the results of this file (with -anchors merged)")
	fs.StringVar(&c.serviceLog, "service-log", "error", "level of the Flow services' log on stderr: debug, info, warn, error or off")
	var sizes listFlag
	fs.Var(&sizes, "size", "override a repetition's size, NAME=N comma-separated: W7=20000 (runs, steps or milliseconds, as docs/performance.md says)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for _, p := range project {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-project %q: want node counts, comma-separated", p)
		}
		c.project = append(c.project, n)
	}
	for _, p := range partitions {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > streams.MaxPartitions {
			return nil, fmt.Errorf("-partitions %q: want counts from 1 to %d, comma-separated", p, streams.MaxPartitions)
		}
		c.partitions = append(c.partitions, n)
	}
	c.sizes = map[string]int{}
	for _, s := range sizes {
		name, n, ok := strings.Cut(s, "=")
		v, err := strconv.Atoi(n)
		if !ok || err != nil {
			return nil, fmt.Errorf("-size %q: want NAME=N", s)
		}
		c.sizes[name] = v
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if len(c.syncs) == 0 {
		c.syncs = listFlag{"default", "always"}
	}
	if c.replicas < 1 || c.replicas > 5 || c.replicas > 1 && c.embedded {
		return nil, fmt.Errorf("-replicas %d: want 1 to 5, and 1 with -embedded", c.replicas)
	}
	return c, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	started := time.Now()

	var file *bench.File
	var runErr error
	if c.from != "" {
		if file, err = bench.ReadFile(c.from); err != nil {
			return err
		}
	} else {
		if c.out == "" {
			c.out = "bench-results/" + started.UTC().Format("20060102T150405Z") + ".json"
		}
		if !c.embedded && c.natsServer == "" {
			c.natsServer = "bin/nats-server"
			logger.Info("building nats-server", slog.String("out", c.natsServer))
			if err := bench.BuildNATS(ctx, c.natsServer); err != nil {
				return err
			}
		}
		svcLog, err := serviceLogger(c.serviceLog, stderr)
		if err != nil {
			return err
		}
		file = &bench.File{Started: started.UTC().Format(time.RFC3339), Quick: c.quick, Host: host()}
		file.Results, runErr = bench.Run(ctx, bench.Options{
			Quick: c.quick, Syncs: c.syncs, Embedded: c.embedded, SerialCommits: c.serial, EagerStart: c.eager, Replicas: c.replicas, PartitionCounts: c.partitions, NATSServer: c.natsServer,
			Workloads: c.workloads, Sizes: c.sizes, CPUProfileDir: c.cpuProfile, MemProfileDir: c.memProfile,
			Logger: logger, ServiceLogger: svcLog,
		})
		logger.Info("flowbench done", slog.Duration("took", time.Since(started).Round(time.Second)))
	}
	var others []*bench.File
	for _, a := range c.anchors {
		f, err := bench.ReadFile(a)
		if err != nil {
			return errors.Join(runErr, err)
		}
		others = append(others, f)
	}
	merged, replaced := bench.Merge(file, others...)
	for _, r := range replaced {
		logger.Warn("a merged file replaces a result", slog.String("result", r))
	}
	if c.out != "" {
		if err := bench.WriteFile(c.out, merged); err != nil {
			return errors.Join(runErr, err)
		}
		logger.Info("results written", slog.String("file", c.out))
	}
	if c.chart == "" && c.out != "" {
		c.chart = strings.TrimSuffix(c.out, ".json") + ".png"
	}
	if c.chart != "" {
		if err := bench.WriteChart(c.chart, merged.Results); err != nil {
			return errors.Join(runErr, fmt.Errorf("chart: %w", err))
		}
		logger.Info("chart written", slog.String("file", c.chart))
	}
	fmt.Fprintf(stdout, "\nflowbench %s (quick=%v, %d CPUs, %s, commit %s)\n\n", merged.Started, merged.Quick,
		merged.Host.CPUs, merged.Host.Go, merged.Host.Commit)
	if err := bench.WriteTable(stdout, merged.Results); err != nil || len(c.project) == 0 {
		return errors.Join(runErr, err)
	}
	in, err := bench.ProjectionInputsOf(merged.Results, c.projectVariant)
	if err != nil {
		return errors.Join(runErr, fmt.Errorf("-project: %w", err))
	}
	fmt.Fprintln(stdout)
	return errors.Join(runErr, bench.WriteProjection(stdout, in, bench.Project(in, c.project, c.projectCores)))
}

func serviceLogger(level string, w io.Writer) (*slog.Logger, error) {
	if level == "off" {
		return slog.New(slog.DiscardHandler), nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-service-log: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})).With(slog.String("from", "flow")), nil
}

// host describes this machine and the commit of the working tree ("-dirty" when it has
// uncommitted changes to tracked files).
func host() bench.Host {
	h := bench.Host{CPUs: runtime.NumCPU(), Go: runtime.Version(), Commit: "unknown"}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		h.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			h.Commit += "-dirty"
		}
	}
	return h
}
