package crashtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// testTimeout bounds each test's waits; the tests take a few seconds.
const testTimeout = 45 * time.Second

// A worker dies after its step applied the external effect and before the step's result is
// committed. Another worker takes the task once AckWait passes without heartbeats, runs the step
// again, and the idempotency key keeps the effect single.
func TestWorkerKilledMidStep(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	ctx := testContext(t)
	dir := scratchDir(t)
	client := newClient(t, srv)
	cfg := childConfig{Role: roleWorker, NATSURL: srv.ClientURL(), Dir: dir, AckWait: 2 * time.Second}

	a := startChild(t, cfg.named("worker-a"))
	runID, err := client.Start(ctx, effectWorkflow, effectInput{Resource: "card"}, &flow.StartOptions{RunID: "effect-1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, markerFile))
		return err == nil
	}, testTimeout, 10*time.Millisecond, "the step never reached its effect in worker A")
	a.kill(t)
	startChild(t, cfg.named("worker-b"))

	var out string
	result(t, ctx, client, runID, &out)
	const key = "effect-1:apply:card"
	require.Equal(t, "applied "+key, out)

	t.Run("StepInvokedTwice", func(t *testing.T) {
		require.Equal(t, []string{"effect-1 apply 1 worker-a", "effect-1 apply 1 worker-b"}, readLines(t, filepath.Join(dir, invocationsFile)))
	})
	t.Run("EffectAppliedOnce", func(t *testing.T) {
		entries, err := os.ReadDir(filepath.Join(dir, effectsDir))
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		require.Equal(t, []string{key}, names)
	})
	t.Run("HistoryValid", func(t *testing.T) {
		hist, err := client.History(ctx, runID, 0)
		require.NoError(t, err)
		require.Empty(t, core.Check(runID, hist))
		require.Equal(t, 1, countTypes(hist)[event.TypeStepCompleted])
		require.Equal(t, event.TypeRunCompleted, hist[len(hist)-1].Type())
	})
}

// The leading scheduler dies while every run sleeps on a pending timer. Nothing fires the timers
// while no scheduler lives; a new scheduler takes the lease once the dead one's expires
// (Streams.LeaseTTL) and fires each overdue timer once.
func TestSchedulerKilledWithPendingTimers(t *testing.T) {
	t.Parallel()
	const (
		runs     = 20
		nap      = 2 * time.Second
		leaseTTL = 2 * time.Second
	)
	srv := natstest.RunJetStream(t)
	ctx := testContext(t)
	client := newClient(t, srv)
	// The worker holds no run for its timer (HoldTimers): its timers wait for a scheduler.
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: natstest.Logger(), HoldTimers: -1}, newRegistry(t.TempDir(), "worker"))
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	leases, err := natstest.JetStream(t, srv).KeyValue(ctx, streams.LeasesBucket)
	require.NoError(t, err)
	cfg := childConfig{Role: roleScheduler, NATSURL: srv.ClientURL(), Dir: scratchDir(t), LeaseTTL: leaseTTL}

	first := startChild(t, cfg.named("scheduler-1"))
	waitForLease(t, leases, "scheduler-1")
	ids := napping(t, ctx, client, "nap", runs, nap)
	first.kill(t)
	killedAt := time.Now()

	// The leader is dead, so the timers still pending now are the ones it left unfired.
	var firstDue, lastDue time.Time
	for _, id := range ids {
		s, err := client.Snapshot(ctx, id)
		require.NoError(t, err)
		require.Equal(t, flow.StatusSuspended, s.Status, "run %s", id)
		w := s.Waits["nap"]
		require.False(t, w.Fired, "run %s: fired before the scheduler was killed", id)
		if firstDue.IsZero() || w.Deadline.Before(firstDue) {
			firstDue = w.Deadline
		}
		if w.Deadline.After(lastDue) {
			lastDue = w.Deadline
		}
	}
	require.True(t, killedAt.Before(firstDue), "a timer fell due %s before the scheduler was killed; the test ran too slowly", killedAt.Sub(firstDue))
	t.Logf("scheduler-1 killed %s before the first timer was due", firstDue.Sub(killedAt).Round(time.Millisecond))
	t.Run("NotFiredWithoutScheduler", func(t *testing.T) {
		waitUntil(t, ctx, lastDue.Add(200*time.Millisecond))
		for _, id := range ids {
			s, err := client.Snapshot(ctx, id)
			require.NoError(t, err)
			require.Equal(t, flow.StatusSuspended, s.Status, "run %s", id)
		}
	})

	startChild(t, cfg.named("scheduler-2"))
	for _, id := range ids {
		var out string
		result(t, ctx, client, id, &out)
		require.Equal(t, "rested", out)
	}

	t.Run("NewSchedulerLeads", func(t *testing.T) {
		waitForLease(t, leases, "scheduler-2")
	})
	t.Run("FiredOncePerRun", func(t *testing.T) {
		for _, id := range ids {
			hist, err := client.History(ctx, id, 0)
			require.NoError(t, err)
			require.Empty(t, core.Check(id, hist), "run %s", id)
			require.Equal(t, 1, countTypes(hist)[event.TypeWaitFired], "run %s", id)
		}
	})
	t.Run("TimersDeleted", func(t *testing.T) {
		timers, err := natstest.JetStream(t, srv).KeyValue(ctx, streams.TimersBucket)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			keys, err := timers.ListKeys(ctx)
			if err != nil {
				return false
			}
			n := 0
			for range keys.Keys() {
				n++
			}
			return n == 0
		}, testTimeout, 20*time.Millisecond)
	})
}

// A worker dies while it holds runs for their timers (HoldTimers), their tasks unacknowledged.
// The scheduler hands each timer, when due, to the runs' workers, and another worker fires it
// and ends the run: on time, long before AckWait would have given it the dead worker's tasks.
func TestWorkerKilledHoldingRuns(t *testing.T) {
	t.Parallel()
	const (
		runs = 10
		nap  = 1500 * time.Millisecond
	)
	srv := natstest.RunJetStream(t)
	ctx := testContext(t)
	client := newClient(t, srv)
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: natstest.Logger()})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop()) })
	cfg := childConfig{Role: roleWorker, NATSURL: srv.ClientURL(), Dir: scratchDir(t), AckWait: time.Minute}
	a := startChild(t, cfg.named("worker-a"))
	ids := napping(t, ctx, client, "held", runs, nap)
	a.kill(t)
	killedAt := time.Now()
	startChild(t, cfg.named("worker-b"))

	for _, id := range ids {
		var out string
		result(t, ctx, client, id, &out)
		require.Equal(t, "rested", out)
		hist, err := client.History(ctx, id, 0)
		require.NoError(t, err)
		require.Empty(t, core.Check(id, hist), "run %s", id)
		require.Equal(t, 1, countTypes(hist)[event.TypeWaitFired], "run %s", id)
		end := hist[len(hist)-1].Time
		require.True(t, end.Before(killedAt.Add(30*time.Second)), "run %s ended %s after the kill: not by the hand-off", id, end.Sub(killedAt))
	}
	require.Positive(t, s.HandedOff())
}

// Two worker processes serve one queue and are handed the same runs at once: besides each run's
// own resume task, extra tasks with distinct message IDs make both drive it concurrently. Both
// run step attempts; the store's optimistic concurrency lets one result per step commit.
func TestTwoWorkersDriveSameRuns(t *testing.T) {
	t.Parallel()
	const (
		runs       = 30
		parts      = 5
		extraTasks = 3
	)
	srv := natstest.RunJetStream(t)
	ctx := testContext(t)
	dir := scratchDir(t)
	client := newClient(t, srv)
	js := natstest.JetStream(t, srv)
	cfg := childConfig{Role: roleWorker, NATSURL: srv.ClientURL(), Dir: dir}
	startChild(t, cfg.named("worker-a"))
	startChild(t, cfg.named("worker-b"))

	ids := make([]string, runs)
	for i := range ids {
		id, err := client.Start(ctx, faninWorkflow, faninInput{Parts: parts}, &flow.StartOptions{RunID: fmt.Sprintf("fanin-%02d", i)})
		require.NoError(t, err)
		ids[i] = id
		for k := range extraTasks {
			publishTask(t, ctx, js, id, fmt.Sprintf("%s:extra-%d", id, k))
		}
	}
	want := 0
	for i := range parts {
		want += i * i
	}
	for _, id := range ids {
		var out int
		result(t, ctx, client, id, &out)
		require.Equal(t, want*want, out, "run %s", id)
	}

	t.Run("HistoriesValid", func(t *testing.T) {
		for _, id := range ids {
			hist, err := client.History(ctx, id, 0)
			require.NoError(t, err)
			require.Empty(t, core.Check(id, hist), "run %s", id)
			completed := map[string]int{}
			for _, e := range hist {
				if c, ok := e.Payload.(*event.StepCompleted); ok {
					completed[c.StepID]++
				}
			}
			require.Len(t, completed, parts+1, "run %s", id)
			for step, n := range completed {
				require.Equal(t, 1, n, "run %s: step %s completed %d times", id, step, n)
			}
		}
	})
	t.Run("BothWorkersRanSteps", func(t *testing.T) {
		by := map[string]map[string]bool{} // "<run> <step>" -> workers that invoked it
		for _, line := range readLines(t, filepath.Join(dir, invocationsFile)) {
			f := strings.Fields(line)
			require.Len(t, f, 4, "invocation line %q", line)
			k := f[0] + " " + f[1]
			if by[k] == nil {
				by[k] = map[string]bool{}
			}
			by[k][f[3]] = true
		}
		require.Len(t, by, runs*(parts+1), "every step ran")
		workers, both := map[string]bool{}, 0
		for _, ws := range by {
			for w := range ws {
				workers[w] = true
			}
			if len(ws) == 2 {
				both++
			}
		}
		require.Equal(t, map[string]bool{"worker-a": true, "worker-b": true}, workers)
		require.Positive(t, both, "no step ran in both workers: the workers never drove a run at once")
		t.Logf("%d of %d steps ran in both workers", both, len(by))
	})
}

// testContext returns a context that ends after testTimeout or with the test.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// scratchDir returns the directory the test shares with its children.
func scratchDir(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, effectsDir), 0o755))
	return dir
}

// newClient starts a history service in this process, which every scenario needs (it registers
// timers, sends resume tasks, indexes runs), and returns a client.
// napping starts n runs of napWorkflow, prefix-00 and on, sleeping nap, waits until every one
// is suspended on its timer and returns their IDs.
func napping(t *testing.T, ctx context.Context, client *flow.Client, prefix string, n int, nap time.Duration) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		var err error
		ids[i], err = client.Start(ctx, napWorkflow, napInput{Nap: nap}, &flow.StartOptions{RunID: fmt.Sprintf("%s-%02d", prefix, i)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		for _, id := range ids {
			s, err := client.Snapshot(ctx, id)
			if err != nil || s.Status != flow.StatusSuspended {
				return false
			}
		}
		return true
	}, testTimeout, 10*time.Millisecond, "the runs did not all suspend on their timers")
	return ids
}

func newClient(t *testing.T, srv *natsserver.Server) *flow.Client {
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: natstest.Logger()})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: natstest.Logger()})
	return newBareClient(t, srv)
}

// newBareClient returns a client without starting a history service.
func newBareClient(t *testing.T, srv *natsserver.Server) *flow.Client {
	c, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	return c
}

// waitForLease waits until the scheduler lease names holder.
func waitForLease(t *testing.T, leases jetstream.KeyValue, holder string) {
	t.Helper()
	require.Eventually(t, func() bool {
		e, err := leases.Get(t.Context(), "scheduler")
		return err == nil && string(e.Value()) == holder
	}, testTimeout, 20*time.Millisecond, "%s never took the scheduler lease", holder)
}

// waitUntil returns once the wall clock passes deadline.
func waitUntil(t *testing.T, ctx context.Context, deadline time.Time) {
	t.Helper()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		t.Fatalf("waiting until %s: %v", deadline.Format(time.RFC3339Nano), ctx.Err())
	}
}

// publishTask sends a resume task for run runID on the default queue with message ID msgID, as
// the engine's host does but under an ID it never uses, so that it is not deduplicated.
func publishTask(t *testing.T, ctx context.Context, js jetstream.JetStream, runID, msgID string) {
	t.Helper()
	body, err := json.Marshal(engine.Task{RunID: runID, Seq: 1})
	require.NoError(t, err)
	msg := nats.NewMsg(streams.TaskSubject(streams.DefaultQueue, "", runID))
	msg.Data = body
	_, err = js.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID))
	require.NoError(t, err)
}

// result waits for run runID's result, with its history in the failure message.
func result(t *testing.T, ctx context.Context, client *flow.Client, runID string, out any) {
	t.Helper()
	if err := client.Result(ctx, runID, out); err != nil {
		t.Fatalf("run %s: %v\n%s", runID, err, describeRun(client, runID))
	}
}

// describeRun returns a run's history, for failure messages.
func describeRun(client *flow.Client, runID string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hist, err := client.History(ctx, runID, 0)
	if err != nil {
		return fmt.Sprintf("history of %s: %v", runID, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "history of %s:\n", runID)
	for _, e := range hist {
		p, _ := json.Marshal(e.Payload)
		fmt.Fprintf(&b, "  %d %s %s %s\n", e.Seq, e.Time.Format("15:04:05.000"), e.Type(), p)
	}
	return b.String()
}

// countTypes counts a history's events by type.
func countTypes(hist []event.Envelope) map[event.Type]int {
	n := map[event.Type]int{}
	for _, e := range hist {
		n[e.Type()]++
	}
	return n
}

// readLines returns the lines of the file at path; none if it does not exist.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}
