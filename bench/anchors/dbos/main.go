// Command dbos runs the workloads of Flow's performance plan (W1..W7) on DBOS Transact Go, on
// PostgreSQL (system "dbos-postgres") and on SQLite (system "dbos-sqlite"), and writes the
// result file of the shared plan's schema. See ../README.md.
//
// W8 (cold resume of a worker with an empty cache) is not run: DBOS has no run cache to be cold;
// every step of a workflow reads and writes the database directly, and its nearest counterpart,
// recovery after a process restart, re-executes workflows from their start, which is another
// measurement. The JetStream ceilings do not apply either.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// dbosVersion is the DBOS Transact Go release the harness is built against (go.mod).
const dbosVersion = "v1.8.0"

var selfPID = os.Getpid()

// sizes are the workload sizes of the shared plan (full) or of a quick run.
type sizes struct {
	w1, w2, w3, w3big, w4, w5, w6, w7 int
	sleep                             time.Duration
}

var (
	fullSizes  = sizes{w1: 300, w2: 2000, w3: 1000, w3big: 10000, w4: 500, w5: 500, w6: 10000, w7: 100000, sleep: 2 * time.Second}
	quickSizes = sizes{w1: 50, w2: 200, w3: 100, w4: 500, w5: 100, w6: 500, w7: 2000, sleep: 2 * time.Second}
)

// workload is one entry of the plan. once: no warm-up and a single repetition (W3-10k, W7).
type workload struct {
	name string
	once bool
	run  func(e *env) (metrics, error)
}

func workloads(s sizes) []workload {
	ws := []workload{
		{name: "W1", run: runW1},
		{name: "W2", run: runW2},
		{name: "W3", run: func(e *env) (metrics, error) { return runW3(e, e.sizes.w3) }},
	}
	if s.w3big > 0 {
		ws = append(ws, workload{name: "W3-10k", once: true, run: func(e *env) (metrics, error) { return runW3(e, e.sizes.w3big) }})
	}
	return append(ws,
		workload{name: "W4", run: runW4},
		workload{name: "W5", run: runW5},
		workload{name: "W6", run: runW6},
		workload{name: "W7", once: true, run: runW7},
	)
}

func main() {
	backendFlag := flag.String("backend", "both", "postgres, sqlite or both")
	quick := flag.Bool("quick", false, "small sizes (W1 50 runs, W2 200, W3 100, W5 100, W6 500 steps, W7 2,000; no W3-10k)")
	only := flag.String("workloads", "", "comma-separated workloads to run (default: all): W1,W2,W3,W3-10k,W4,W5,W6,W7")
	out := flag.String("out", "", "write the result JSON to this file")
	pg := flag.String("pg", envOr("ANCHORS_PG_DSN", "postgres://postgres@127.0.0.1:55432/dbos_bench?sslmode=disable"), "PostgreSQL DSN (scripts/anchors-deps.sh start prints it)")
	sqliteDir := flag.String("sqlite-dir", "", "directory of the SQLite database files (default: a temporary directory, removed at exit)")
	reps := flag.Int("reps", 3, "timed repetitions per workload (after one warm-up)")
	w7 := flag.Int("w7-runs", 0, "override the number of suspended runs of W7")
	child := flag.Bool("child", false, "internal: run one workload on one backend in this process and write its result to -out")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))

	s := fullSizes
	if *quick {
		s = quickSizes
	}
	if *w7 > 0 {
		s.w7 = *w7
	}
	selected, err := selectWorkloads(workloads(s), *only)
	if err != nil {
		fatal(err)
	}
	kinds := strings.Split(strings.ReplaceAll(*backendFlag, "both", "postgres,sqlite"), ",")
	for _, k := range kinds {
		if k != "postgres" && k != "sqlite" {
			fatal(fmt.Errorf("unknown backend %q", k))
		}
	}
	if *sqliteDir == "" {
		dir, err := os.MkdirTemp("", "flow-anchors-sqlite-")
		if err != nil {
			fatal(err)
		}
		defer os.RemoveAll(dir)
		*sqliteDir = dir
	}

	if *child {
		if len(kinds) != 1 || len(selected) != 1 {
			fatal(fmt.Errorf("-child runs one backend and one workload"))
		}
		be := newBackend(kinds[0], *pg, *sqliteDir)
		r, err := runWorkload(be, selected[0], s, *reps)
		be.closeQuery()
		if err != nil {
			fatal(fmt.Errorf("%s %s: %w", be.system, selected[0].name, err))
		}
		if err := writeJSON(*out, r); err != nil {
			fatal(err)
		}
		return
	}

	// Every (backend, workload) runs in a process of its own, so that one workload's memory
	// (Go keeps what it once allocated) is not in the next one's peak RSS or idle heap.
	rep := &report{
		Started: time.Now().UTC().Format(time.RFC3339),
		Quick:   *quick,
		Host:    hostInfo{CPUs: runtime.NumCPU(), Go: runtime.Version(), Commit: gitCommit()},
	}
	common := []string{"-pg", *pg, "-sqlite-dir", *sqliteDir, "-reps", fmt.Sprint(*reps), "-w7-runs", fmt.Sprint(s.w7)}
	if *quick {
		common = append(common, "-quick")
	}
	begun := time.Now()
	for _, k := range kinds {
		for _, w := range selected {
			r, err := runChild(append([]string{"-backend", k, "-workloads", w.name}, common...))
			if err != nil {
				fatal(fmt.Errorf("dbos-%s %s: %w", k, w.name, err))
			}
			rep.Results = append(rep.Results, r)
			if err := rep.write(*out); err != nil {
				fatal(err)
			}
		}
	}
	fmt.Printf("DBOS Transact Go %s, %s, %d CPUs, quick=%v, %s\n", dbosVersion, runtime.Version(), runtime.NumCPU(), *quick, time.Since(begun).Round(time.Second))
	fmt.Print(table(rep.Results))
}

// runChild runs this program with -child and args, and returns the result it wrote.
func runChild(args []string) (result, error) {
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	f, err := os.CreateTemp("", "flow-anchors-result-")
	if err != nil {
		return result{}, err
	}
	f.Close()
	defer os.Remove(f.Name())
	cmd := exec.Command(self, append([]string{"-child", "-out", f.Name()}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return result{}, err
	}
	data, err := os.ReadFile(f.Name())
	if err != nil {
		return result{}, err
	}
	var r result
	err = json.Unmarshal(data, &r)
	return r, err
}

// runWorkload runs w on be: a fresh system database and DBOS context, one warm-up unless
// w.once, then the timed repetitions, with the processes measured over the timed ones only.
func runWorkload(be *backend, w workload, s sizes, reps int) (result, error) {
	bg := context.Background()
	url, err := be.prepare(bg, w.name)
	if err != nil {
		return result{}, err
	}
	ctx, err := dbos.NewContext(bg, dbos.Config{
		AppName:     "flow-anchors",
		DatabaseURL: url,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return result{}, err
	}
	defer func() {
		if err := dbos.Shutdown(ctx, 30*time.Second); err != nil {
			slog.Warn("DBOS shutdown", "err", err)
		}
	}()
	register(ctx)
	if err := dbos.Launch(ctx); err != nil {
		return result{}, err
	}
	if err := be.launched(); err != nil {
		return result{}, err
	}

	groups := map[string]*procGroup{"dbos": newProcGroup(func() []int { return []int{selfPID} }, false)}
	if pids := be.serverPIDs(bg); pids != nil {
		groups["postgres"] = newProcGroup(pids, true)
	}
	e := &env{ctx: ctx, be: be, sizes: s, name: strings.ToLower(w.name)}
	if w.once {
		reps = 1
	} else {
		t0 := time.Now()
		if _, err := w.run(e); err != nil {
			return result{}, fmt.Errorf("warm-up: %w", err)
		}
		slog.Info("warm-up done", "system", be.system, "workload", w.name, "took", time.Since(t0).Round(time.Millisecond))
	}
	runtime.GC()
	debug.FreeOSMemory()
	for _, g := range groups {
		g.begin()
	}
	r := result{System: be.system, Variant: "default", Workload: w.name}
	for i := 1; i <= reps; i++ {
		e.rep = i
		t0 := time.Now()
		m, err := w.run(e)
		if err != nil {
			return result{}, fmt.Errorf("repetition %d: %w", i, err)
		}
		for k, v := range m {
			m[k] = round(v)
		}
		for _, g := range groups {
			g.lap()
		}
		slog.Info("repetition done", "system", be.system, "workload", w.name, "rep", i, "took", time.Since(t0).Round(time.Millisecond), "metrics", m)
		r.Reps = append(r.Reps, m)
	}
	r.Metrics = medians(r.Reps)
	r.Processes = map[string]procStats{}
	for name, g := range groups {
		r.Processes[name] = g.end()
	}
	return r, nil
}

func selectWorkloads(all []workload, only string) ([]workload, error) {
	if only == "" {
		return all, nil
	}
	var out []workload
	for _, name := range strings.Split(only, ",") {
		found := false
		for _, w := range all {
			if strings.EqualFold(w.name, strings.TrimSpace(name)) {
				out = append(out, w)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown workload %q (W3-10k runs in full mode only)", name)
		}
	}
	return out, nil
}

func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func fatal(err error) {
	slog.Error("anchors", "err", err)
	os.Exit(1)
}
