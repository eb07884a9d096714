package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// controlled is a job under flow control: one short step per run, the key its customer.
func controlled(c flow.FlowControl) *flow.Registry {
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: natstest.Logger()})
	flow.RegisterWorkflow(reg, "job", func(ctx *flow.Context, in jobInput) (flow.Decision, error) {
		out, ok, err := flow.Output[int](ctx, "work")
		if err != nil || !ok {
			return ctx.ScheduleStep("work", "work", in.N), err
		}
		return ctx.Complete(out), nil
	}, flow.WithFlowControl(c))
	flow.RegisterStep(reg, "work", func(ctx context.Context, n int) (int, error) {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return n, nil
	})
	return reg
}

type jobInput struct {
	Customer string `json:"customer"`
	N        int    `json:"n"`
}

func startWorker(t *testing.T, nc *nats.Conn, reg *flow.Registry) *worker.Worker {
	t.Helper()
	w, err := worker.New(worker.Config{Conn: nc, AckWait: time.Second, Logger: natstest.Logger()}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	return w
}

// TestFlowControlThousandRuns is the flow-control test of issue 10: 1,000 runs over 10 keys,
// at most 2 active runs per key and at most 200 starts per second overall, with a worker killed
// (its connection closed) mid-test and another started. An independent projection of every
// run's history, read straight from the history stream, must show that no key ever held more
// than 2 active runs ([run.admitted, terminal]), that no 1 s window holds more than 200
// admissions, that no key starves, and that every run completed. The admission leader is
// stopped at two thirds, and a standby scheduler takes over.
func TestFlowControlThousandRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 runs at 200 starts/s: about 10 s")
	}
	const runs, keys, perKey, rate = 1000, 10, 2, 200
	srv := natstest.RunJetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	quiet := natstest.Logger()
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { _ = h.Stop() })
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), Logger: quiet})

	fc := flow.FlowControl{KeyPath: "$.customer", KeyConcurrency: perKey, Rate: rate, RatePeriod: time.Second}
	victimConn := natstest.Connect(t, srv)
	victim := startWorker(t, victimConn, controlled(fc))
	steady := startWorker(t, natstest.Connect(t, srv), controlled(fc))
	t.Cleanup(func() { _ = steady.Stop(context.Background()) })
	client, err := flow.NewClient(ctx, natstest.Connect(t, srv), nil)
	require.NoError(t, err)

	// Started key by key before the admission controller runs, so that a controller serving runs
	// in start order would serve one key after another: fairness must come from the controller.
	ids := make([]string, 0, runs)
	inputs := map[string]jobInput{}
	for k := range keys {
		for i := range runs / keys {
			id := fmt.Sprintf("job-k%d-%03d", k, i)
			ids = append(ids, id)
			inputs[id] = jobInput{Customer: fmt.Sprintf("k%d", k), N: k*1000 + i}
		}
	}
	t0 := time.Now()
	var started atomic.Int64
	var wg sync.WaitGroup
	next := make(chan string)
	for range 16 {
		wg.Go(func() {
			for id := range next {
				_, err := client.Start(ctx, "job", inputs[id], &flow.StartOptions{RunID: id})
				if err != nil {
					t.Errorf("starting %s: %v", id, err)
				}
				started.Add(1)
			}
		})
	}
	go func() {
		defer close(next)
		for _, id := range ids {
			select {
			case next <- id:
			case <-ctx.Done():
				return
			}
		}
	}()

	wg.Wait()
	require.EqualValues(t, runs, started.Load())
	began := time.Now()

	// Every run waits in the admission queue, derived from history by the history service; the
	// admission controller (in the scheduler) starts only now, and reads the whole queue.
	queue, err := natstest.JetStream(t, srv).KeyValue(ctx, streams.QueueBucket)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := queue.Status(ctx)
		return err == nil && st.Values() == runs
	}, time.Minute, 10*time.Millisecond, "every run is queued for admission")
	snap, err := client.Snapshot(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, core.StatusQueued, snap.Status)
	// Two schedulers: one leads admission, the other stands by and takes over when it stops.
	leaseTTL := streams.Config{LeaseTTL: 3 * time.Second}
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Name: "first", Streams: leaseTTL, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop() })
	require.Eventually(t, s.Admitting, 10*time.Second, 5*time.Millisecond)
	standby, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Name: "standby", Streams: leaseTTL, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, standby.Start(ctx))
	t.Cleanup(func() { _ = standby.Stop() })

	// Kill the first worker once a third of the runs are admitted: its connection goes, with
	// the tasks and step attempts it held; another worker starts in its place.
	require.Eventually(t, func() bool { return s.Admitted() >= runs/3 }, time.Minute, 5*time.Millisecond)
	victimConn.Close()
	stopCtx, stop := context.WithCancel(context.Background())
	stop()
	_ = victim.Stop(stopCtx)
	replacement := startWorker(t, natstest.Connect(t, srv), controlled(fc))
	t.Cleanup(func() { _ = replacement.Stop(context.Background()) })

	// Stop the admission leader at two thirds: the standby takes over the queue and the limits
	// (the rate log is durable in FLOW_LIMITS) where it left them.
	require.Eventually(t, func() bool { return s.Admitted() >= 2*runs/3 }, 2*time.Minute, 5*time.Millisecond)
	require.NoError(t, s.Stop())

	// Every run completes with its output.
	results := make(chan string)
	var waiters sync.WaitGroup
	for range 32 {
		waiters.Go(func() {
			for id := range results {
				var out int
				if err := client.Result(ctx, id, &out); err != nil {
					t.Errorf("run %s: %v", id, err)
				} else if out != inputs[id].N {
					t.Errorf("run %s: output %d, want %d", id, out, inputs[id].N)
				}
			}
		})
	}
	for _, id := range ids {
		results <- id
	}
	close(results)
	waiters.Wait()
	if t.Failed() {
		return
	}

	require.Positive(t, standby.Admitted(), "the standby admitted the rest")
	hist := readAllHistories(t, ctx, natstest.JetStream(t, srv))
	require.Len(t, hist, runs)
	type span struct {
		run        string
		key        string
		start, end time.Time
	}
	var spans []span
	for _, id := range ids {
		envs := hist[id]
		require.Empty(t, core.Check(id, envs), "run %s", id)
		var sp span
		sp.run, sp.key = id, inputs[id].Customer
		for _, e := range envs {
			switch p := e.Payload.(type) {
			case *event.RunStarted:
				require.NotNil(t, p.Control, "run %s records its control", id)
				require.Equal(t, sp.key, p.Control.Key)
				require.Equal(t, perKey, p.Control.KeyConcurrency)
			case *event.RunAdmitted:
				require.True(t, sp.start.IsZero(), "run %s admitted twice", id)
				sp.start = e.Time
			case *event.StepScheduled:
				require.False(t, sp.start.IsZero(), "run %s decided before its admission", id)
			case *event.RunCompleted:
				sp.end = e.Time
			}
		}
		require.False(t, sp.start.IsZero(), "run %s was admitted", id)
		require.False(t, sp.end.IsZero(), "run %s completed", id)
		spans = append(spans, sp)
	}

	// At no instant does a key hold more than perKey active runs: a sweep over the intervals,
	// ends before starts at the same instant.
	type edge struct {
		at    time.Time
		delta int
		key   string
	}
	var edges []edge
	for _, sp := range spans {
		edges = append(edges, edge{sp.start, +1, sp.key}, edge{sp.end, -1, sp.key})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	active := map[string]int{}
	peak := 0
	for _, e := range edges {
		active[e.key] += e.delta
		require.LessOrEqual(t, active[e.key], perKey, "key %s holds %d active runs at %s", e.key, active[e.key], e.at.Format(time.RFC3339Nano))
		peak = max(peak, active[e.key])
	}
	require.Equal(t, perKey, peak, "the per-key limit was reached")

	// No window of 1 s, closed at both ends, holds more than rate admissions: the (rate+1)-th
	// admission after any admission comes more than 1 s after it.
	admissions := make([]time.Time, 0, runs)
	for _, sp := range spans {
		admissions = append(admissions, sp.start)
	}
	slices.SortFunc(admissions, func(a, b time.Time) int { return a.Compare(b) })
	for i := 0; i+rate < len(admissions); i++ {
		gap := admissions[i+rate].Sub(admissions[i])
		require.Greater(t, gap, time.Second, "admissions %d..%d lie within %s", i, i+rate, gap)
	}
	total := admissions[len(admissions)-1].Sub(admissions[0])
	require.GreaterOrEqual(t, total, time.Duration(runs/rate-1)*time.Second, "the rate limit held the admissions back")

	var busy time.Duration
	for _, sp := range spans {
		busy += sp.end.Sub(sp.start)
	}
	t.Logf("mean run time (admitted to completed): %s", busy/time.Duration(len(spans)))

	// No key starves: every key is admitted among the first admissions, and each key has a fair
	// share of the first half of all admissions (runs were started key by key).
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	firstSeen := map[string]int{}
	for i, sp := range spans {
		if _, ok := firstSeen[sp.key]; !ok {
			firstSeen[sp.key] = i
		}
	}
	require.Len(t, firstSeen, keys)
	for k, i := range firstSeen {
		require.Less(t, i, 4*keys, "key %s first admitted as admission %d", k, i)
	}
	half := map[string]int{}
	for _, sp := range spans[:runs/2] {
		half[sp.key]++
	}
	for k, n := range half {
		require.InDelta(t, runs/2/keys, n, float64(runs/2/keys)/2, "key %s has %d of the first %d admissions: %v", k, n, runs/2, half)
	}
	t.Logf("started %d runs in %s; admitted them in %s (%d by the first leader, %d by the standby); per-key peak %d; first half per key %v",
		runs, began.Sub(t0), total, s.Admitted(), standby.Admitted(), peak, half)
}

// readAllHistories reads every run's history from the history stream with an ordered consumer:
// a projection that shares nothing with Flow's read side.
func readAllHistories(t *testing.T, ctx context.Context, js jetstream.JetStream) map[string][]event.Envelope {
	t.Helper()
	cons, err := js.OrderedConsumer(ctx, streams.History, jetstream.OrderedConsumerConfig{FilterSubjects: []string{streams.AllRuns}})
	require.NoError(t, err)
	st, err := js.Stream(ctx, streams.History)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	out := map[string][]event.Envelope{}
	for read := uint64(0); read < info.State.Msgs; {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			read++
			runID := strings.TrimPrefix(m.Subject(), streams.Layout{}.Subject(""))
			c, ok := jsstore.CommitOf(runID, m.Headers(), m.Data())
			require.True(t, ok, "a commit of run %s", runID)
			envs, _, err := jsstore.DecodeCommit(runID, c.First, c.Last, m.Data())
			require.NoError(t, err)
			out[runID] = append(out[runID], envs...)
		}
		require.NoError(t, batch.Error())
	}
	return out
}
