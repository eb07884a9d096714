package scheduler_test

// BenchmarkTimerBurst is workload W3 of the performance issue: N workflows, started at once,
// each sleeping 2 s (ctx.Sleep) and then completing. It runs the embedded default: a real
// nats-server with JetStream in this process (file storage on a temp dir, one replica), and a
// history service, an ingress, a worker, a scheduler and a client in this process, each on its
// own in-process connection.
//
// It is a benchmark only: `go test ./services/scheduler` compiles but does not run it. Run:
//
//	go test -run '^$' -bench 'TimerBurst' -benchtime=1x ./services/scheduler
//	go test -run '^$' -bench 'TimerBurst/timers=1000$' -benchtime=1x -count=3 ./services/scheduler
//
// One iteration starts N runs from 64 goroutines and waits for all their results. The times of
// the runs' events come from the public event feed (flow.events.>), as the history service
// publishes them, or, for a run whose events the feed did not all show, from its history read
// afterwards. It reports, over the N runs:
//   - lateness-p50-ms, lateness-p99-ms, lateness-max-ms: the recorded time of wait.fired minus
//     the wait's deadline (wait.scheduled);
//   - resume-p50-ms, resume-p99-ms: the recorded time of run.completed minus the deadline, and
//     fire-to-end-p50-ms, fire-to-end-p99-ms: minus wait.fired's;
//   - fires/s: N over the span from the first deadline to the last wait.fired;
//   - start-s: how long the N starts took (the deadlines are spread over it), and
//     deadline-spread-s, the span of the deadlines;
//   - registered-ahead-p1-ms, registered-ahead-p50-ms: the deadline minus the time the timer's
//     entry was written (by the history service, as it follows the stream): negative when the
//     scheduler cannot know of a timer before it is due;
//   - cpu-ms/run: the CPU time of this process (every service and the client) per run, and,
//     when FLOW_BENCH_NATS_PID names the process of an external server, nats-cpu-ms/run: its
//     CPU time per run. Less noisy than latencies on a shared machine.
//
// A wait.fired recorded before its deadline fails the benchmark: a timer never fires early.
//
// FLOW_BENCH_NATS_URL=nats://host:port uses that server instead of an embedded one (NATS out of
// process, as a user deploys it): for example a server built with
// `go build -o /tmp/nats-server github.com/nats-io/nats-server/v2` and started with
// `/tmp/nats-server -js -sd /tmp/x -p 4333`. FLOW_BENCH_CONN=url connects to the embedded server
// over TCP instead of in process. FLOW_BENCH_FIRE_CONCURRENCY sets the scheduler's
// FireConcurrency and FLOW_BENCH_PRELOAD_WINDOW its PreloadWindow (defaults: the scheduler's).

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/internal/fanout"
	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

const (
	burstWorkflow = "burst-nap"
	burstNap      = 2 * time.Second
	burstClients  = 64
	// The worker's concurrency, as in the worker's benchmarks.
	burstRunConcurrency  = 64
	burstStepConcurrency = 64
	burstDeadline        = 5 * time.Minute
)

// burstInput is the input of the burst-nap workflow.
type burstInput struct {
	Nap time.Duration `json:"nap"`
}

// burstNapWorkflow sleeps in.Nap under wait "nap", then completes.
func burstNapWorkflow(ctx *flow.Context, in burstInput) (flow.Decision, error) {
	if !ctx.Fired("nap") {
		return ctx.Sleep("nap", in.Nap), nil
	}
	return ctx.Complete(nil), nil
}

// burstEnv is a client, and the times of the runs' timers as the public event feed shows them.
type burstEnv struct {
	client *flow.Client
	feed   *burstFeed
}

// newBurstEnv starts a server (or uses FLOW_BENCH_NATS_URL's), a history service, an ingress, a
// worker and a scheduler, all stopped when b ends, and subscribes to the feed of the runs.
func newBurstEnv(b *testing.B) *burstEnv {
	b.Helper()
	ctx := context.Background()
	discard := slog.New(slog.DiscardHandler)
	connect := natstest.BenchConnect(b, "", natsconn.SyncQueue)

	historytest.Start(b, history.Config{Conn: connect(), HTTPAddr: "off", Logger: discard})
	ingresstest.Start(b, ingress.Config{Conn: connect(), Logger: discard})

	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: discard})
	flow.RegisterWorkflow(reg, burstWorkflow, burstNapWorkflow)
	w, err := worker.New(worker.Config{Conn: connect(), Logger: discard,
		RunConcurrency: burstRunConcurrency, StepConcurrency: burstStepConcurrency}, reg)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := w.Stop(context.Background()); err != nil {
			b.Error(err)
		}
	})
	startBenchScheduler(b, scheduler.Config{Conn: connect(), Logger: discard})

	nc := connect()
	c, err := flow.NewClient(ctx, nc, nil)
	if err != nil {
		b.Fatal(err)
	}
	f := &burstFeed{times: map[string]*burstTimes{}, registered: map[string]time.Time{}}
	if _, err := nc.Subscribe(api.FeedPrefix+burstWorkflow+".>", f.note); err != nil {
		b.Fatal(err)
	}
	// When each timer entry is written, as a watch of the bucket sees it.
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, streams.TimersBucket)
	if err != nil {
		b.Fatal(err)
	}
	kw, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = kw.Stop() })
	go func() {
		for e := range kw.Updates() {
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				runID, _, _ := strings.Cut(e.Key(), ".")
				f.mu.Lock()
				if _, ok := f.registered[runID]; !ok {
					f.registered[runID] = e.Created()
				}
				f.mu.Unlock()
			}
		}
	}()
	return &burstEnv{client: c, feed: f}
}

// burstFeed collects the times of the runs' timers from the public event feed, as the events
// are committed: reading every history afterwards would load the server with reads of runs
// interleaved with thousands of others.
type burstFeed struct {
	mu    sync.Mutex
	times map[string]*burstTimes
	// registered is when each run's timer entry was written.
	registered map[string]time.Time
}

// note records a feed event: its recorded time (ce-time) and, for wait.scheduled, the deadline.
func (f *burstFeed) note(m *nats.Msg) {
	rest := strings.TrimPrefix(m.Subject, api.FeedPrefix+burstWorkflow+".")
	runID, typ, ok := strings.Cut(rest, ".")
	if !ok {
		return
	}
	at, err := time.Parse(time.RFC3339Nano, m.Header.Get(cloudevent.HeaderTime))
	if err != nil {
		return
	}
	var deadline time.Time
	if event.Type(typ) == event.TypeWaitScheduled {
		var w event.WaitScheduled
		if json.Unmarshal(m.Data, &w) != nil {
			return
		}
		deadline = w.Deadline
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.times[runID]
	if t == nil {
		t = &burstTimes{}
		f.times[runID] = t
	}
	switch {
	case event.Type(typ) == event.TypeWaitScheduled:
		t.deadline = deadline
	case event.Type(typ) == event.TypeWaitFired:
		t.fired = at
	case event.Type(typ).Terminal():
		t.ended = at
	}
}

// take returns and forgets the times of run id, if the feed showed all of them.
func (f *burstFeed) take(id string) (burstTimes, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.times[id]
	if t == nil || t.deadline.IsZero() || t.fired.IsZero() || t.ended.IsZero() {
		return burstTimes{}, false
	}
	delete(f.times, id)
	return *t, true
}

// registeredAt returns when run id's timer entry was written, if a watch saw it.
func (f *burstFeed) registeredAt(id string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.registered[id]
	delete(f.registered, id)
	return at, ok
}

// burstTimes are the recorded times of one run's timer.
type burstTimes struct {
	deadline, fired, ended time.Time
	// registered is when the timer entry was written (zero if unknown).
	registered time.Time
}

// burstRun reads run id's history and returns its timer's times.
func burstRun(ctx context.Context, c *flow.Client, id string) (burstTimes, error) {
	hist, err := c.History(ctx, id, 0)
	if err != nil {
		return burstTimes{}, fmt.Errorf("run %s: %w", id, err)
	}
	var t burstTimes
	for _, e := range hist {
		switch p := e.Payload.(type) {
		case *event.WaitScheduled:
			t.deadline = p.Deadline
		case *event.WaitFired:
			t.fired = e.Time
		}
		if e.Type().Terminal() {
			t.ended = e.Time
		}
	}
	if t.deadline.IsZero() || t.fired.IsZero() || t.ended.IsZero() {
		return t, fmt.Errorf("run %s: no wait.scheduled, wait.fired or terminal event in %d events", id, len(hist))
	}
	return t, nil
}

// burst starts n runs sleeping nap, waits for their results and returns their timers' times and
// how long the starts took. A run whose events the feed did not all show (it is best effort)
// has its history read.
func burst(ctx context.Context, env *burstEnv, n int, nap time.Duration) ([]burstTimes, time.Duration, error) {
	c := env.client
	ids := make([]string, n)
	t0 := time.Now()
	if err := fanout.Each(ctx, burstClients, n, func(i int) error {
		id, err := c.Start(ctx, burstWorkflow, burstInput{Nap: nap}, nil)
		ids[i] = id
		return err
	}); err != nil {
		return nil, 0, err
	}
	started := time.Since(t0)
	if err := fanout.Each(ctx, burstClients, n, func(i int) error { return c.Result(ctx, ids[i], nil) }); err != nil {
		return nil, 0, err
	}
	times := make([]burstTimes, n)
	err := fanout.Each(ctx, burstClients, n, func(i int) error {
		var err error
		for wait := time.Millisecond; ; wait *= 2 {
			var ok bool
			if times[i], ok = env.feed.take(ids[i]); ok {
				return nil
			}
			if wait > 100*time.Millisecond {
				break
			}
			time.Sleep(wait) // the feed's last events may still be on their way
		}
		times[i], err = burstRun(ctx, c, ids[i])
		return err
	})
	for i := range times {
		times[i].registered, _ = env.feed.registeredAt(ids[i])
	}
	return times, started, err
}

func BenchmarkTimerBurst(b *testing.B) {
	for _, n := range burstSizes() {
		b.Run("timers="+strconv.Itoa(n), func(b *testing.B) {
			env := newBurstEnv(b)
			ctx, cancel := context.WithTimeout(context.Background(), burstDeadline)
			defer cancel()
			// Warm up: streams, consumers, connections.
			if _, _, err := burst(ctx, env, 5, 10*time.Millisecond); err != nil {
				b.Fatal(err)
			}
			var late, resumed, gap, ahead []time.Duration
			var firstDue, lastDue, lastFired time.Time
			var startTotal time.Duration
			cpu0, natsCPU0 := processCPU(b), natsCPU(b)
			b.ResetTimer()
			for range b.N {
				times, started, err := burst(ctx, env, n, burstNap)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				startTotal += started
				for _, t := range times {
					if t.fired.Before(t.deadline) {
						b.Errorf("wait.fired recorded at %s, %s before its deadline %s", t.fired, t.deadline.Sub(t.fired), t.deadline)
					}
					late = append(late, t.fired.Sub(t.deadline))
					resumed = append(resumed, t.ended.Sub(t.deadline))
					gap = append(gap, t.ended.Sub(t.fired))
					if !t.registered.IsZero() {
						ahead = append(ahead, t.deadline.Sub(t.registered))
					}
					if firstDue.IsZero() || t.deadline.Before(firstDue) {
						firstDue = t.deadline
					}
					if t.deadline.After(lastDue) {
						lastDue = t.deadline
					}
					if t.fired.After(lastFired) {
						lastFired = t.fired
					}
				}
				b.StartTimer()
			}
			b.StopTimer()
			runs := float64(b.N * n)
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Millisecond)/runs, "cpu-ms/run")
			if natsCPU0 >= 0 {
				b.ReportMetric(float64(natsCPU(b)-natsCPU0)/float64(time.Millisecond)/runs, "nats-cpu-ms/run")
			}
			slices.Sort(late)
			slices.Sort(resumed)
			slices.Sort(gap)
			slices.Sort(ahead)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(quantile(late, 0.50)), "lateness-p50-ms")
			b.ReportMetric(ms(quantile(late, 0.99)), "lateness-p99-ms")
			b.ReportMetric(ms(late[len(late)-1]), "lateness-max-ms")
			b.ReportMetric(ms(quantile(resumed, 0.50)), "resume-p50-ms")
			b.ReportMetric(ms(quantile(resumed, 0.99)), "resume-p99-ms")
			b.ReportMetric(ms(quantile(gap, 0.50)), "fire-to-end-p50-ms")
			b.ReportMetric(ms(quantile(gap, 0.99)), "fire-to-end-p99-ms")
			if len(ahead) > 0 {
				// How long before its deadline the scheduler could know of each timer: a timer
				// registered after its deadline is late before the scheduler sees it.
				b.ReportMetric(ms(quantile(ahead, 0.01)), "registered-ahead-p1-ms")
				b.ReportMetric(ms(quantile(ahead, 0.50)), "registered-ahead-p50-ms")
			}
			if span := lastFired.Sub(firstDue); span > 0 && b.N == 1 {
				b.ReportMetric(float64(n)/span.Seconds(), "fires/s")
				b.ReportMetric(lastDue.Sub(firstDue).Seconds(), "deadline-spread-s")
			}
			b.ReportMetric(startTotal.Seconds()/float64(b.N), "start-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// processCPU returns the CPU time this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startBenchScheduler starts a scheduler with cfg, its FireConcurrency and PreloadWindow from
// FLOW_BENCH_FIRE_CONCURRENCY and FLOW_BENCH_PRELOAD_WINDOW when set, and stops it when b ends.
func startBenchScheduler(b *testing.B, cfg scheduler.Config) *scheduler.Scheduler {
	b.Helper()
	var err error
	if v := os.Getenv("FLOW_BENCH_FIRE_CONCURRENCY"); v != "" {
		if cfg.FireConcurrency, err = strconv.Atoi(v); err != nil {
			b.Fatalf("FLOW_BENCH_FIRE_CONCURRENCY: %v", err)
		}
	}
	if v := os.Getenv("FLOW_BENCH_PRELOAD_WINDOW"); v != "" {
		if cfg.PreloadWindow, err = time.ParseDuration(v); err != nil {
			b.Fatalf("FLOW_BENCH_PRELOAD_WINDOW: %v", err)
		}
	}
	s, err := scheduler.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Stop() })
	return s
}

// natsCPU returns the CPU time the process FLOW_BENCH_NATS_PID names used so far, or -1 when it
// is unset.
func natsCPU(b *testing.B) time.Duration {
	pid := os.Getenv("FLOW_BENCH_NATS_PID")
	if pid == "" {
		return -1
	}
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command (in parentheses): utime and stime are the 12th and 13th.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ
}

// quantile returns the q-quantile of sorted, by nearest rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// burstSizes are the sub-benchmarks' numbers of timers: 100, 1,000 and 10,000, or those
// FLOW_BENCH_TIMERS lists (comma-separated).
func burstSizes() []int {
	v := os.Getenv("FLOW_BENCH_TIMERS")
	if v == "" {
		return []int{100, 1000, 10000}
	}
	var ns []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			panic("FLOW_BENCH_TIMERS: " + v)
		}
		ns = append(ns, n)
	}
	return ns
}
