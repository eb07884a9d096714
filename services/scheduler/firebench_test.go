package scheduler_test

// BenchmarkTimerFire measures the scheduler alone: N runs, each suspended on a wait that falls
// due at the same instant, written straight to the history stream and the timer bucket before
// the scheduler starts (no worker, no history service). It reports, over the N timers,
// lateness-p50-ms, lateness-p99-ms and lateness-max-ms (the recorded time of wait.fired minus
// the deadline), fires/s (N over the span from the deadline to the last wait.fired) and
// cpu-ms/fire (this process, with the embedded server, from the scheduler's start to the last
// firing; nats-cpu-ms/fire for an external server named by FLOW_BENCH_NATS_PID).
//
//	go test -run '^$' -bench 'TimerFire' -benchtime=1x ./services/scheduler
//
// FLOW_BENCH_NATS_URL, FLOW_BENCH_CONN, FLOW_BENCH_FIRE_CONCURRENCY and FLOW_BENCH_PRELOAD_WINDOW
// work as for BenchmarkTimerBurst.

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/flowrun/flow/internal/fanout"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/services/scheduler"
)

func BenchmarkTimerFire(b *testing.B) {
	for _, n := range burstSizes() {
		b.Run("timers="+strconv.Itoa(n), func(b *testing.B) {
			if b.N != 1 {
				b.Skip("one iteration only: run with -benchtime=1x")
			}
			benchTimerFire(b, n)
		})
	}
}

func benchTimerFire(b *testing.B, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), burstDeadline)
	defer cancel()
	connect := natstest.BenchConnect(b, "")
	sleepers := scheduler.NewBenchSleepers(ctx, b, connect())

	// Every timer falls due at once, after the runs are written and the scheduler has loaded
	// the bucket.
	due := time.Now().Add(2*time.Second + time.Duration(n)*400*time.Microsecond).UTC().Truncate(time.Millisecond)
	ids := make([]string, n)
	if err := fanout.Each(ctx, burstClients, n, func(i int) error {
		id := "fire-" + strconv.Itoa(i)
		ids[i] = id
		_, _, err := sleepers.Write(ctx, id, time.Now().UTC(), due)
		return err
	}); err != nil {
		b.Fatal(err)
	}

	if left := time.Until(due); left < time.Second {
		b.Fatalf("writing the runs left %s before the deadline; the scheduler needs time to load them", left)
	}
	cpu0, natsCPU0 := processCPU(b), natsCPU(b)
	// No worker runs here: the scheduler fires every timer itself when due (no hand-off).
	s := startBenchScheduler(b, scheduler.Config{Conn: connect(), Logger: discardLogger(), HandOffGrace: -1})
	b.ResetTimer()
	for s.Fired() < int64(n) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	cpu, natsUsed := processCPU(b)-cpu0, natsCPU(b)-natsCPU0

	late := make([]time.Duration, n)
	if err := fanout.Each(ctx, burstClients, n, func(i int) error {
		last, err := sleepers.Store.LastCommit(ctx, ids[i])
		if err != nil {
			return err
		}
		e := last[len(last)-1]
		if e.Type() != event.TypeWaitFired {
			b.Errorf("run %s: last event %s, not wait.fired", ids[i], e.Type())
		}
		late[i] = e.Time.Sub(due)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	slices.Sort(late)
	if late[0] < 0 {
		b.Errorf("a wait.fired was recorded %s before its deadline", -late[0])
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(quantile(late, 0.50)), "lateness-p50-ms")
	b.ReportMetric(ms(quantile(late, 0.99)), "lateness-p99-ms")
	b.ReportMetric(ms(late[n-1]), "lateness-max-ms")
	if late[n-1] > 0 {
		b.ReportMetric(float64(n)/late[n-1].Seconds(), "fires/s")
	}
	b.ReportMetric(ms(cpu)/float64(n), "cpu-ms/fire")
	if natsCPU0 >= 0 {
		b.ReportMetric(ms(natsUsed)/float64(n), "nats-cpu-ms/fire")
	}
	b.ReportMetric(0, "ns/op")
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
