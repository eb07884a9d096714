package history_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/parked"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/worker"
)

// A run pinned to a build no worker of its queue runs waits for one without holding any other
// worker's tasks, and the runs index says why; a worker of that build takes it when it starts.
// A task that reached a worker of another build anyway (sent by an older version of Flow) is
// parked, and dispatched again when a worker of the run's build registers.
func TestWrongBuildRunsWaitForTheirBuild(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startHistory(t, srv)
	v2, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet}, registry("v2"))
	require.NoError(t, err)
	require.NoError(t, v2.Start(t.Context()))
	require.NoError(t, v2.Stop(context.Background())) // new runs now pin build v2
	client := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var ids []string
	for _, id := range []string{"pinned", "legacy"} {
		// Started while v2 workers served it: they are gone since.
		ids = append(ids, ingresstest.Accepted(t, natstest.Connect(t, srv), "steps", id, 2, "v2"))
	}
	startWorker(t, srv, registry("v1")) // the latest registration now names build v1

	// An older Flow sent pinned runs' tasks to every worker of the queue.
	js := natstest.JetStream(t, srv)
	msg := nats.NewMsg(streams.TaskSubject(streams.DefaultQueue, "", "legacy"))
	msg.Data = []byte(`{"run_id":"legacy","seq":1}`)
	_, err = js.PublishMsg(ctx, msg)
	require.NoError(t, err)
	for _, runID := range ids {
		require.Eventually(t, func() bool {
			d, err := client.Describe(ctx, runID, 0)
			return err == nil && d.Entry != nil && strings.Contains(d.Entry.Parked, `build "v2"`)
		}, 20*time.Second, 10*time.Millisecond, "run %s is shown waiting for build v2", runID)
	}
	parked, err := js.KeyValue(ctx, streams.ParkedBucket)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := parked.Get(ctx, "legacy"); return err == nil }, 20*time.Second, 10*time.Millisecond,
		"the v1 worker parks the run whose task reached it")
	for _, runID := range ids {
		d, err := client.Describe(ctx, runID, 0)
		require.NoError(t, err)
		require.Equal(t, uint64(1), d.Snapshot.Seq, "nothing was recorded in run %s", runID)
	}
	requireNoTaskPending(t, ctx, srv)

	startWorker(t, srv, registry("v2"))
	for _, runID := range ids {
		var out int
		require.NoError(t, client.Result(ctx, runID, &out))
		require.Equal(t, 2, out)
	}
	require.Eventually(t, func() bool { _, err := parked.Get(ctx, "legacy"); return err != nil }, 20*time.Second, 10*time.Millisecond,
		"the registration of build v2 dispatched the parked run and removed its entry")
	require.Eventually(t, func() bool {
		d, err := client.Describe(ctx, "legacy", 0)
		return err == nil && d.Entry != nil && d.Entry.Parked == "" && d.Entry.Status == flow.StatusCompleted
	}, 20*time.Second, 10*time.Millisecond)
}

// A bad deploy blocks many runs of one definition; runs of another definition on the same
// queue keep flowing, because blocked runs are parked, not redelivered forever; a fixed deploy
// then resumes every blocked run. FLOW_TEST_BLOCKED_RUNS sets how many of each (default 2000).
func TestBlockedRunsDoNotHoldTheQueue(t *testing.T) {
	t.Parallel()
	n := 2000
	if v := os.Getenv("FLOW_TEST_BLOCKED_RUNS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	srv := natstest.RunJetStream(t)
	startHistory(t, srv)
	bad := registry("")
	flow.RegisterWorkflow(bad, "flaky", func(ctx *flow.Context, _ int) (flow.Decision, error) {
		panic("bad deploy")
	})
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet}, bad)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	client := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	healthy := make([]string, n)
	each(t, 2*n, func(i int) error {
		def, in := "flaky", i
		if i%2 == 1 {
			def, in = "steps", 1
		}
		id, err := client.Start(ctx, def, in, &flow.StartOptions{RunID: fmt.Sprintf("%s-%d", def, i/2)})
		if i%2 == 1 {
			healthy[i/2] = id
		}
		return err
	})
	each(t, n, func(i int) error {
		var out int
		if err := client.Result(ctx, healthy[i], &out); err != nil || out != 1 {
			return fmt.Errorf("healthy run %s: %d, %v", healthy[i], out, err)
		}
		return nil
	})
	page, err := client.Runs(ctx, &flow.RunsFilter{Definition: "flaky", Status: []string{string(core.StatusBlocked)}, Limit: 1})
	require.NoError(t, err)
	t.Logf("%d healthy runs completed while %d runs of the same queue were blocked", n, page.Total)
	require.Eventually(t, func() bool {
		page, err := client.Runs(ctx, &flow.RunsFilter{Definition: "flaky", Status: []string{string(core.StatusBlocked)}, Limit: 1})
		return err == nil && page.Total == n
	}, 60*time.Second, 50*time.Millisecond, "every flaky run is blocked")
	requireNoTaskPending(t, ctx, srv)

	require.NoError(t, w.Stop(context.Background()))
	fixed := registry("")
	flow.RegisterWorkflow(fixed, "flaky", func(ctx *flow.Context, i int) (flow.Decision, error) { return ctx.Complete(i), nil })
	startWorker(t, srv, fixed)
	require.Eventually(t, func() bool {
		page, err := client.Runs(ctx, &flow.RunsFilter{Definition: "flaky", Status: []string{string(core.StatusCompleted)}, Limit: 1})
		return err == nil && page.Total == n
	}, 5*time.Minute, 50*time.Millisecond, "the fixed deploy resumes every blocked run")
	each(t, n, func(i int) error {
		var out int
		if err := client.Result(ctx, fmt.Sprintf("flaky-%d", i), &out); err != nil || out != 2*i {
			return fmt.Errorf("blocked run flaky-%d after the fix: %d, %v", i, out, err)
		}
		return nil
	})
}

// requireNoTaskPending waits until the default queue's consumer holds no unacknowledged task.
func requireNoTaskPending(t *testing.T, ctx context.Context, srv *natsserver.Server) {
	t.Helper()
	js := natstest.JetStream(t, srv)
	cons, err := js.Consumer(ctx, streams.Tasks, "worker-"+streams.DefaultQueue)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}, 30*time.Second, 20*time.Millisecond, "parked and blocked runs hold no task")
}

// each calls fn(0..n-1) from 32 goroutines and fails the test with the first error.
func each(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	next := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// A run parked while no history service ran is shown parked once one starts: nothing else
// would write its entry, since a parked run gets no new commits.
func TestRunParkedWhileTheServiceWasDownIsShownParked(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h := startHistory(t, srv)
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet}, registry(""))
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	require.NoError(t, w.Stop(context.Background())) // the definition is registered; no worker runs
	client := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	runID := ingresstest.Accepted(t, natstest.Connect(t, srv), "steps", "unserved", 1, "") // started while the worker lived
	require.Eventually(t, func() bool {
		d, err := client.Describe(ctx, runID, 0)
		return err == nil && d.Entry != nil
	}, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, h.Stop())

	// A worker parks the run while the service is down.
	js := natstest.JetStream(t, srv)
	parkedKV, err := js.KeyValue(ctx, streams.ParkedBucket)
	require.NoError(t, err)
	b, err := json.Marshal(parked.Run{RunID: runID, Queue: streams.DefaultQueue, Definition: "steps",
		Reason: "waiting for a worker that registers workflow \"steps\"", Seq: 1, ParkedAt: time.Now().UTC()})
	require.NoError(t, err)
	_, err = parkedKV.Put(ctx, runID, b)
	require.NoError(t, err)

	startHistory(t, srv)
	require.Eventually(t, func() bool {
		d, err := client.Describe(ctx, runID, 0)
		return err == nil && d.Entry != nil && strings.Contains(d.Entry.Parked, `registers workflow "steps"`)
	}, 20*time.Second, 10*time.Millisecond, "the run's entry says why it is parked")
}
