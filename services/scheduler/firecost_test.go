package scheduler

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/timerindex"
	"github.com/flowrun/flow/pkg/event"
)

// BenchmarkFireCost fires b.N due timers one after the other, each of its own run, as one fire
// worker does: "cold" reads the run first (no preload), "preloaded" fires on what the preload
// read. Their ns/op is the latency of one isolated firing, its append, resume task and entry
// deletion included. The runs are written and preloaded untimed.
//
//	go test -run '^$' -bench FireCost -benchtime=1000x ./services/scheduler
//
// FLOW_BENCH_NATS_URL uses that server instead of an embedded one.
func BenchmarkFireCost(b *testing.B) {
	for _, preload := range []bool{false, true} {
		b.Run(map[bool]string{false: "cold", true: "preloaded"}[preload], func(b *testing.B) {
			ctx := context.Background()
			var nc *nats.Conn
			if url := os.Getenv("FLOW_BENCH_NATS_URL"); url != "" {
				var err error
				if nc, err = nats.Connect(url, natsconn.SyncQueue); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(nc.Close)
			} else {
				nc = natstest.Connect(b, natstest.RunJetStream(b))
			}
			s, err := New(Config{Conn: nc, Logger: natstest.Logger()})
			if err != nil {
				b.Fatal(err)
			}
			s.nc = nc
			if err := s.open(ctx); err != nil {
				b.Fatal(err)
			}
			s.wire()
			sleepers := NewBenchSleepers(ctx, b, nc)
			due := time.Now().UTC()
			prefix := "cost-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
			type job struct {
				t    core.Timer
				rev  uint64
				tail *engine.RunTail
			}
			jobs := make([]job, b.N)
			for i := range jobs {
				t, rev, err := sleepers.Write(ctx, prefix+strconv.Itoa(i), due, due)
				if err != nil {
					b.Fatal(err)
				}
				jobs[i] = job{t: t, rev: rev}
			}
			if preload {
				for i := range jobs {
					jobs[i].tail = s.timers.preload(ctx, jobs[i].t, false)
				}
			}
			cpu0 := processCPU(b)
			b.ResetTimer()
			for _, j := range jobs {
				if err := s.timers.fire(ctx, j.t, &firing{rev: j.rev, tail: j.tail}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/fire")
		})
	}
}

// BenchSleepers writes the runs whose timers the benchmarks fire: each suspended on wait "nap",
// appended straight to the history stream, with its timer's entry written to FLOW_TIMERS as the
// history service would write it.
type BenchSleepers struct {
	// Store holds the runs' histories.
	Store  *jsstore.Store
	timers jetstream.KeyValue
}

// NewBenchSleepers creates Flow's streams on nc's server if needed, and opens the history stream
// and FLOW_TIMERS.
func NewBenchSleepers(ctx context.Context, b *testing.B, nc *nats.Conn) *BenchSleepers {
	b.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		b.Fatal(err)
	}
	st, err := jsstore.New(ctx, js, nil)
	if err != nil {
		b.Fatal(err)
	}
	timers, err := js.KeyValue(ctx, streams.TimersBucket)
	if err != nil {
		b.Fatal(err)
	}
	return &BenchSleepers{Store: st, timers: timers}
}

// Write appends run id, its events stamped at, suspended on wait "nap" until due, and writes the
// timer's entry; it returns the timer and the entry's revision.
func (s *BenchSleepers) Write(ctx context.Context, id string, at, due time.Time) (core.Timer, uint64, error) {
	if _, err := s.Store.Append(ctx, id, 0, event.Event{Time: at, Payload: &event.RunStarted{
		Spec: event.Spec{Definition: "sleeper"}, Input: json.RawMessage("null"), Seed: "seed"}}); err != nil {
		return core.Timer{}, 0, err
	}
	if _, err := s.Store.Append(ctx, id, 1, event.Event{Time: at, Payload: &event.WaitScheduled{WaitID: "nap", Deadline: due}}); err != nil {
		return core.Timer{}, 0, err
	}
	t := core.Timer{RunID: id, Kind: core.TimerWait, ID: "nap", Due: due, Seq: 2}
	v, err := json.Marshal(t)
	if err != nil {
		return core.Timer{}, 0, err
	}
	rev, err := s.timers.Put(ctx, timerindex.Key(t), v)
	return t, rev, err
}

// processCPU returns the CPU time this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
