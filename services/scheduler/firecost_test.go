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
			js, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			st, err := jsstore.New(ctx, js, nil)
			if err != nil {
				b.Fatal(err)
			}
			kv, err := js.KeyValue(ctx, streams.TimersBucket)
			if err != nil {
				b.Fatal(err)
			}
			due := time.Now().UTC()
			prefix := "cost-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
			type job struct {
				t    core.Timer
				rev  uint64
				tail *engine.RunTail
			}
			jobs := make([]job, b.N)
			for i := range jobs {
				id := prefix + strconv.Itoa(i)
				if _, err := st.Append(ctx, id, 0, event.Event{Time: due, Payload: &event.RunStarted{
					Spec: event.Spec{Definition: "sleeper"}, Input: json.RawMessage("null"), Seed: "seed"}}); err != nil {
					b.Fatal(err)
				}
				if _, err := st.Append(ctx, id, 1, event.Event{Time: due, Payload: &event.WaitScheduled{WaitID: "nap", Deadline: due}}); err != nil {
					b.Fatal(err)
				}
				t := core.Timer{RunID: id, Kind: core.TimerWait, ID: "nap", Due: due, Seq: 2}
				v, _ := json.Marshal(t)
				rev, err := kv.Put(ctx, timerindex.Key(t), v)
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
				if err := s.timers.fire(ctx, j.t, firing{rev: j.rev, tail: j.tail}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/fire")
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
