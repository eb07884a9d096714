package worker_test

// End-to-end benchmarks of the embedded default: an embedded nats-server with JetStream (file
// storage on a temp dir, one replica), and a history service, a worker, a scheduler and a client
// in this process,
// each on its own in-process connection (srv.Connect()). The workflow runs 10 sequential steps,
// each returning its input+1.
//
// They are benchmarks only: `go test ./services/worker` compiles but does not run them. Run:
//
//	go test -run '^$' -bench 'TenStepLatency' -benchtime=500x -count=3 ./services/worker
//	go test -run '^$' -bench 'TenStepThroughput' -benchtime=1x -count=3 ./services/worker
//
// TenStepLatency drives one run at a time (client.Start, then client.Result), b.N runs, and
// reports p50-ms, p99-ms and ms/step (mean latency / 10). TenStepThroughput starts 2,000 runs per
// iteration from 64 goroutines, then waits for all their results from 64 goroutines, and
// reports runs/s and steps/s; one iteration is 2,000 runs, hence -benchtime=1x. Both have a
// sub-benchmark per JetStream fsync policy (natsserver.Config.Sync): sync=default ("") and
// sync=always.
//
// Both also report msgs/step: the messages stored in all of JetStream (history, tasks, every
// key-value bucket, counted by the streams' last sequences) per step. SignalRoundTrip times
// Client.Signal to Client.Result for a run already waiting on the signal:
//
//	go test -run '^$' -bench 'SignalRoundTrip' -benchtime=300x -count=3 ./services/worker
//
// FLOW_BENCH_CONN=url connects over TCP (srv.ClientURL()) instead. In process is the default: it
// is about 25% faster for latency and the same for throughput on a 2-core machine.
// FLOW_BENCH_NATS_URL=nats://host:port uses that server instead of an embedded one (its sync
// policy is the server's own: the sub-benchmarks' names then do not describe it).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/fanout"
	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

const (
	benchSteps    = 10
	benchRuns     = 2000 // runs per throughput iteration
	benchClients  = 64   // client goroutines starting runs, then waiting on results
	benchWorkflow = "ten-steps"
	// benchSignalWorkflow waits for one signal (SignalRoundTrip).
	benchSignalWorkflow = "await-signal"
	benchStep           = "inc"
	// The worker's concurrency. On 2 cores throughput is CPU-bound and flat from 8 to 128 runs
	// (within noise); 256 is 15-20% slower. Step slots equal run slots, so that a run of
	// sequential steps never waits for a step slot.
	benchRunConcurrency  = 64
	benchStepConcurrency = 64
	benchDeadline        = 5 * time.Minute
)

var benchSyncs = []struct{ name, sync string }{
	{"sync=default", ""},
	{"sync=always", "always"},
}

// benchTenSteps runs steps s0..s9 one after the other, each on the previous output, and
// completes with the last output.
func benchTenSteps(ctx *flow.Context, in int) (flow.Decision, error) {
	v := in
	for i := range benchSteps {
		id := "s" + strconv.Itoa(i)
		out, ok, err := flow.Output[int](ctx, id)
		if err != nil {
			return nil, err
		}
		if !ok {
			return ctx.ScheduleStep(id, benchStep, v), nil
		}
		v = out
	}
	return ctx.Complete(v), nil
}

func benchInc(_ context.Context, n int) (int, error) { return n + 1, nil }

// benchAwaitSignal waits for signal "go" and completes with its payload.
func benchAwaitSignal(ctx *flow.Context, _ any) (flow.Decision, error) {
	v, ok, err := flow.SignalValue[int](ctx, "go")
	if err != nil || !ok {
		return ctx.AwaitSignal("go", "go"), err
	}
	return ctx.Complete(v), nil
}

type benchEnv struct {
	client *flow.Client
	js     jetstream.JetStream
}

// newBenchEnv starts a server with fsync policy syncPolicy, a worker, a scheduler and a client,
// all stopped when b ends.
func newBenchEnv(b *testing.B, syncPolicy string) *benchEnv {
	b.Helper()
	ctx := context.Background()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	connect := natstest.BenchConnect(b, syncPolicy)

	historytest.Start(b, history.Config{Conn: connect(), HTTPAddr: "off", Logger: discard})
	ingresstest.Start(b, ingress.Config{Conn: connect(), Logger: discard})

	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: discard})
	flow.RegisterWorkflow(reg, benchWorkflow, benchTenSteps)
	flow.RegisterWorkflow(reg, benchSignalWorkflow, benchAwaitSignal)
	flow.RegisterStep(reg, benchStep, benchInc)
	w, err := worker.New(worker.Config{Conn: connect(), Logger: discard,
		RunConcurrency: benchRunConcurrency, StepConcurrency: benchStepConcurrency}, reg)
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
	s, err := scheduler.New(scheduler.Config{Conn: connect(), Logger: discard})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Stop() })

	nc := connect()
	c, err := flow.NewClient(ctx, nc, nil)
	if err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return &benchEnv{client: c, js: js}
}

// written returns the number of messages ever stored in the account's streams (history, tasks
// and every key-value bucket): the sum of their last sequences, which counts messages since
// removed (acknowledged tasks, deleted keys) too.
func (e *benchEnv) written(b *testing.B) uint64 {
	b.Helper()
	var n uint64
	streams := e.js.ListStreams(context.Background())
	for info := range streams.Info() {
		n += info.State.LastSeq
		if os.Getenv("FLOW_BENCH_STREAMS") != "" {
			b.Logf("%s: last seq %d", info.Config.Name, info.State.LastSeq)
		}
	}
	if err := streams.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}

// run starts one run and waits for its result.
func (e *benchEnv) run(ctx context.Context, in int) error {
	id, err := e.client.Start(ctx, benchWorkflow, in, nil)
	if err != nil {
		return err
	}
	return e.result(ctx, id, in)
}

// result waits for run id, started with in, and checks that its output is in+10.
func (e *benchEnv) result(ctx context.Context, id string, in int) error {
	var out int
	if err := e.client.Result(ctx, id, &out); err != nil {
		return fmt.Errorf("run %s: %w", id, err)
	}
	if out != in+benchSteps {
		return fmt.Errorf("run %s: got %d, want %d", id, out, in+benchSteps)
	}
	return nil
}

// warm completes a few runs so that streams, consumers and caches are hot before timing.
func (e *benchEnv) warm(b *testing.B) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchDeadline)
	defer cancel()
	for i := range 5 {
		if err := e.run(ctx, i); err != nil {
			b.Fatal(err)
		}
	}
}

// eachSync runs bench as a sub-benchmark per fsync policy of syncs, on a warm benchEnv of that
// policy, with a context that ends after benchDeadline.
func eachSync(b *testing.B, syncs []struct{ name, sync string }, bench func(ctx context.Context, b *testing.B, env *benchEnv)) {
	for _, sc := range syncs {
		b.Run(sc.name, func(b *testing.B) {
			env := newBenchEnv(b, sc.sync)
			env.warm(b)
			ctx, cancel := context.WithTimeout(context.Background(), benchDeadline)
			defer cancel()
			bench(ctx, b, env)
		})
	}
}

func BenchmarkTenStepLatency(b *testing.B) {
	eachSync(b, benchSyncs, func(ctx context.Context, b *testing.B, env *benchEnv) {
		lat := make([]time.Duration, 0, b.N)
		before := env.written(b)
		b.ResetTimer()
		for i := range b.N {
			t0 := time.Now()
			if err := env.run(ctx, i); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		mean := reportLatencies(b, lat)
		b.ReportMetric(mean/benchSteps, "ms/step")
		b.ReportMetric(float64(env.written(b)-before)/float64(b.N*benchSteps), "msgs/step")
	})
}

// reportLatencies reports the p50-ms and p99-ms of lat, which it sorts, and returns its mean in
// milliseconds.
func reportLatencies(b *testing.B, lat []time.Duration) float64 {
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(benchQuantile(lat, 0.50)), "p50-ms")
	b.ReportMetric(ms(benchQuantile(lat, 0.99)), "p99-ms")
	return ms(sum) / float64(len(lat))
}

// benchQuantile returns the q-quantile of sorted, by nearest rank.
func benchQuantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func BenchmarkTenStepThroughput(b *testing.B) {
	eachSync(b, benchSyncs, func(ctx context.Context, b *testing.B, env *benchEnv) {
		before := env.written(b)
		b.ResetTimer()
		for range b.N {
			if err := env.batch(ctx, benchRuns); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		secs := b.Elapsed().Seconds()
		runs := float64(b.N * benchRuns)
		b.ReportMetric(runs/secs, "runs/s")
		b.ReportMetric(runs*benchSteps/secs, "steps/s")
		b.ReportMetric(float64(env.written(b)-before)/(runs*benchSteps), "msgs/step")
	})
}

// batch starts n runs from benchClients goroutines, then waits for all their results from as
// many goroutines.
func (e *benchEnv) batch(ctx context.Context, n int) error {
	ids := make([]string, n)
	if err := fanout.Each(ctx, benchClients, n, func(i int) error {
		id, err := e.client.Start(ctx, benchWorkflow, i, nil)
		ids[i] = id
		return err
	}); err != nil {
		return err
	}
	return fanout.Each(ctx, benchClients, n, func(i int) error { return e.result(ctx, ids[i], i) })
}

// errAwaiting stops a watch once the run waits on its signal.
var errAwaiting = errors.New("awaiting the signal")

// BenchmarkSignalRoundTrip measures a signal's round trip: from Client.Signal to Client.Result
// returning, for a run already suspended on AwaitSignal (untimed: start, and watch until
// signal.awaited is committed). It reports p50-ms and p99-ms.
func BenchmarkSignalRoundTrip(b *testing.B) {
	eachSync(b, benchSyncs[:1], func(ctx context.Context, b *testing.B, env *benchEnv) {
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := range b.N {
			b.StopTimer()
			id, err := env.client.Start(ctx, benchSignalWorkflow, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			err = env.client.Watch(ctx, id, 0, func(e event.Envelope) error {
				if e.Type() == event.TypeSignalAwaited {
					return errAwaiting
				}
				return nil
			})
			if !errors.Is(err, errAwaiting) {
				b.Fatalf("run %s: %v", id, err)
			}
			b.StartTimer()
			t0 := time.Now()
			if _, err := env.client.Signal(ctx, id, "go", i, nil); err != nil {
				b.Fatal(err)
			}
			var out int
			if err := env.client.Result(ctx, id, &out); err != nil || out != i {
				b.Fatalf("run %s: %d, %v", id, out, err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		reportLatencies(b, lat)
	})
}
