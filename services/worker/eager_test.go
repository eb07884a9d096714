package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/worker"
)

// gated registers "gated", a run of one step "work" that counts its attempts in ran and, while
// gate is not nil, waits until gate is closed. started receives each attempt's run.
func gated(reg *flow.Registry, ran *sync.Map, started chan<- string, gate <-chan struct{}) {
	flow.RegisterWorkflow(reg, "gated", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.StepOutput("work") == nil {
			return ctx.ScheduleStep("work", "work", ctx.RunID()), nil
		}
		return ctx.Complete(ctx.StepOutput("work")), nil
	})
	flow.RegisterStep(reg, "work", func(ctx context.Context, runID string) (string, error) {
		n, _ := ran.LoadOrStore(runID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		if started != nil {
			started <- runID
		}
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "done", nil
	})
}

// startGatedWorker starts a worker of cfg on its own connection, serving gated.
func startGatedWorker(t *testing.T, srv *natsserver.Server, cfg worker.Config, ran *sync.Map, started chan<- string, gate <-chan struct{}) (*worker.Worker, *nats.Conn) {
	t.Helper()
	reg := flow.NewRegistry(nil)
	gated(reg, ran, started, gate)
	nc := natstest.Connect(t, srv)
	cfg.Conn, cfg.Logger = nc, quiet
	w, err := worker.New(cfg, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	return w, nc
}

// offerStack starts a history service and an ingress of cfg on a new server, and returns the
// server, a client and a context that ends within 30 s.
func offerStack(t *testing.T, cfg ingress.Config) (*natsserver.Server, *flow.Client, context.Context) {
	t.Helper()
	srv := natstest.RunJetStream(t)
	startHistoryAndIngressOf(t, srv, cfg)
	c, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return srv, c, ctx
}

// gatedDone waits for run runID of gated to complete and checks its history.
func gatedDone(t *testing.T, ctx context.Context, c *flow.Client, runID string) {
	t.Helper()
	var out string
	require.NoError(t, c.Result(ctx, runID, &out))
	require.Equal(t, "done", out)
	hist, err := c.History(ctx, runID, 0)
	require.NoError(t, err)
	require.Empty(t, core.Check(runID, hist))
}

// ranOnce checks that every run's step in ran ran once.
func ranOnce(t *testing.T, ran *sync.Map) {
	t.Helper()
	ran.Range(func(k, v any) bool {
		require.EqualValues(t, 1, v.(*atomic.Int32).Load(), "run %s's step ran once", k)
		return true
	})
}

// awaitStarts waits for n attempts to start.
func awaitStarts(t *testing.T, ctx context.Context, started <-chan string, n int) {
	t.Helper()
	for range n {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the runs' steps never all started")
		}
	}
}

// tasksSettled waits until the default queue's task consumer holds no task, pending or
// unacknowledged: every durable task of an offered run was settled.
func tasksSettled(t *testing.T, srv *natsserver.Server) {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, srv))
	require.NoError(t, err)
	cons, err := js.Consumer(t.Context(), streams.Tasks, "worker-"+streams.DefaultQueue)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(t.Context())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, 20*time.Second, 10*time.Millisecond, "the offered runs' tasks are acknowledged")
}

// The worker takes each new run offered to it and drives it before its task reaches it; the
// task, which reaches the same worker, is kept until the drive ends and then acknowledged.
func TestOfferedRunsAreDrivenAtOnce(t *testing.T) {
	t.Parallel()
	srv, c, ctx := offerStack(t, ingress.Config{EagerStart: true})
	var ran sync.Map
	w, _ := startGatedWorker(t, srv, worker.Config{}, &ran, nil, nil)
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	const n = 20
	for i := range n {
		runID, err := c.Start(ctx, "gated", nil, &flow.StartOptions{RunID: fmt.Sprintf("eager-%d", i)})
		require.NoError(t, err)
		gatedDone(t, ctx, c, runID)
	}
	require.Positive(t, w.OffersTaken(), "offers were taken")
	tasksSettled(t, srv)
	ranOnce(t, &ran)
}

// A worker that dies driving a run it took from an offer loses nothing: the run's task comes
// back to another worker, which finds no one driving the run and finishes it.
func TestOfferedRunSurvivesItsWorker(t *testing.T) {
	t.Parallel()
	srv, c, ctx := offerStack(t, ingress.Config{EagerStart: true})
	var ran sync.Map
	started, gate := make(chan string, 1), make(chan struct{})
	dying, dyingConn := startGatedWorker(t, srv, worker.Config{AckWait: time.Second}, &ran, started, gate)
	runID, err := c.Start(ctx, "gated", nil, &flow.StartOptions{RunID: "orphan"})
	require.NoError(t, err)
	awaitStarts(t, ctx, started, 1)
	require.EqualValues(t, 1, dying.OffersTaken(), "the worker took the run from its offer")
	// It dies: its connection is gone, with the run's task it kept and the run's driving subject.
	dyingConn.Close()
	t.Cleanup(func() {
		close(gate)
		_ = dying.Stop(context.Background())
	})
	var ran2 sync.Map
	heir, _ := startGatedWorker(t, srv, worker.Config{AckWait: time.Second}, &ran2, nil, nil)
	t.Cleanup(func() { require.NoError(t, heir.Stop(context.Background())) })
	gatedDone(t, ctx, c, runID)
}

// While the worker that took a run's offer drives it, another worker the run's task reaches
// leaves the task for later: the run's step runs once, however the tasks fall.
func TestOfferedRunsAreNotDrivenTwice(t *testing.T) {
	t.Parallel()
	srv, c, ctx := offerStack(t, ingress.Config{EagerStart: true})
	var ran sync.Map
	started, gate := make(chan string, 16), make(chan struct{})
	taker, _ := startGatedWorker(t, srv, worker.Config{}, &ran, started, gate)
	t.Cleanup(func() { require.NoError(t, taker.Stop(context.Background())) })
	other, _ := startGatedWorker(t, srv, worker.Config{NoEagerStart: true}, &ran, started, gate)
	t.Cleanup(func() { require.NoError(t, other.Stop(context.Background())) })
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open) // before the workers stop, whatever failed
	const n = 8
	for i := range n {
		_, err := c.Start(ctx, "gated", nil, &flow.StartOptions{RunID: fmt.Sprintf("shared-%d", i)})
		require.NoError(t, err)
	}
	awaitStarts(t, ctx, started, n)
	open()
	for i := range n {
		gatedDone(t, ctx, c, fmt.Sprintf("shared-%d", i))
	}
	tasksSettled(t, srv)
	ranOnce(t, &ran)
}

// A worker that took a run's offer and died before it sent the run's task committed nothing to
// the run (it commits only once the task is stored): the history service sends the task of the
// run's unanswered start, and a worker drives the run.
func TestOfferTakenAndDroppedLosesNothing(t *testing.T) {
	t.Parallel()
	srv, c, ctx := offerStack(t, ingress.Config{EagerStart: true})
	var ran sync.Map
	inj := &fault.Injector{}
	inj.Arm(fault.OfferTakenBeforeTask, fault.Fail, 0, 1)
	w, _ := startGatedWorker(t, srv, worker.Config{Faults: inj}, &ran, nil, nil)
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	runID, err := c.Start(ctx, "gated", nil, &flow.StartOptions{RunID: "dropped"})
	require.NoError(t, err)
	gatedDone(t, ctx, c, runID)
	require.Equal(t, 1, inj.Hits(fault.OfferTakenBeforeTask), "the offer was taken and dropped")
	require.Zero(t, w.OffersTaken(), "no drive came from the offer")
	tasksSettled(t, srv)
}

// An ingress offers new runs only with EagerStart: by default a new run reaches its worker
// through its task alone.
func TestIngressOffersOnlyWithEagerStart(t *testing.T) {
	t.Parallel()
	srv, c, ctx := offerStack(t, ingress.Config{})
	var ran sync.Map
	w, _ := startGatedWorker(t, srv, worker.Config{}, &ran, nil, nil)
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	runID, err := c.Start(ctx, "gated", nil, nil)
	require.NoError(t, err)
	gatedDone(t, ctx, c, runID)
	require.Zero(t, w.OffersTaken())
	tasksSettled(t, srv)
}
