package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	hbstore "github.com/flowrun/flow/internal/heartbeats"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/worker"
)

// progress is the heartbeat details of the tests' steps.
type progress struct {
	Done int `json:"done"`
}

// startWorkerWith starts a worker of reg with cfg (its Logger filled in, and its Conn, when nil,
// a connection of its own to srv), and returns the connection's Close, so that a test can kill
// the worker by closing it.
func startWorkerWith(t *testing.T, srv *natsserver.Server, reg *flow.Registry, cfg worker.Config) (*worker.Worker, func()) {
	t.Helper()
	if cfg.Conn == nil {
		cfg.Conn = natstest.Connect(t, srv)
	}
	cfg.Logger = quiet
	w, err := worker.New(cfg, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w, cfg.Conn.Close
}

func newClient(t *testing.T, srv *natsserver.Server) *flow.Client {
	t.Helper()
	c, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	return c
}

// runToEnd starts run runID of workflow wf, with no input, and returns its result, which it
// waits for up to within.
func runToEnd[T any](t *testing.T, c *flow.Client, wf, runID string, within time.Duration) T {
	t.Helper()
	_, err := c.Start(t.Context(), wf, nil, &flow.StartOptions{RunID: runID})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	var out T
	require.NoError(t, c.Result(ctx, runID, &out))
	return out
}

// history returns run runID's events, polling until cond holds of them or d passed.
func historyUntil(t *testing.T, c *flow.Client, runID string, d time.Duration, what string, cond func([]event.Envelope) bool) []event.Envelope {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		hist, err := c.History(t.Context(), runID, 0)
		if err == nil && cond(hist) {
			return hist
		}
		if time.Now().After(deadline) {
			require.FailNowf(t, "timed out", "run %s: %s; history: %v (%v)", runID, what, types(hist), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func types(hist []event.Envelope) []event.Type {
	out := make([]event.Type, len(hist))
	for i, e := range hist {
		out[i] = e.Type()
	}
	return out
}

func ended(hist []event.Envelope) bool {
	return len(hist) > 0 && hist[len(hist)-1].Type().Terminal()
}

// timeoutsOf returns the step.failed events of hist that name a timeout.
func timeoutsOf(hist []event.Envelope) []*event.StepFailed {
	var out []*event.StepFailed
	for _, e := range hist {
		if f, ok := e.Payload.(*event.StepFailed); ok && f.Timeout != "" {
			out = append(out, f)
		}
	}
	return out
}

// The test: a step whose worker is killed mid-attempt (its NATS connection closed while
// the step blocks) is retried by another worker within its heartbeat timeout, long before the
// task's ack wait of 60 s would have redelivered it, and the retry reads the details of the
// dead attempt's last heartbeat.
func TestDeadWorkerStepRetriedWithinHeartbeatTimeout(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startServices(t, srv)
	const ackWait = 60 * time.Second
	const hbTimeout = 2 * time.Second

	read := make(chan progress, 4)
	reg := func() *flow.Registry {
		reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
		flow.RegisterWorkflow(reg, "long", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			if out := ctx.StepOutput("crunch"); out != nil {
				return ctx.Complete(out), nil
			}
			return ctx.ScheduleStep("crunch", "crunch", nil, flow.WithHeartbeatTimeout(hbTimeout),
				flow.WithRetry(flow.RetryPolicy{MaxAttempts: 3, InitialInterval: 50 * time.Millisecond})), nil
		})
		flow.RegisterStep(reg, "crunch", func(ctx context.Context, _ any) (progress, error) {
			var p progress
			if _, err := flow.HeartbeatDetails(ctx, &p); err != nil {
				return p, err
			}
			info, _ := flow.StepInfoFrom(ctx)
			read <- p
			if info.Attempt > 1 {
				return progress{Done: p.Done + 1}, nil // resumes from the dead attempt's progress
			}
			for i := 1; i <= 7; i++ {
				if err := flow.Heartbeat(ctx, progress{Done: i}); err != nil {
					return p, err
				}
			}
			<-ctx.Done() // blocks until its worker is gone
			return p, ctx.Err()
		})
		return reg
	}
	_, kill := startWorkerWith(t, srv, reg(), worker.Config{AckWait: ackWait})
	c := newClient(t, srv)
	runID, err := c.Start(t.Context(), "long", nil, &flow.StartOptions{RunID: "long-1"})
	require.NoError(t, err)
	require.Equal(t, progress{}, <-read, "attempt 1 finds no details")

	// The throttled heartbeat reaches FLOW_HEARTBEATS within a second.
	kv, err := natstest.JetStream(t, srv).KeyValue(t.Context(), streams.HeartbeatsBucket)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, err := kv.Get(t.Context(), hbstore.Key(runID, "crunch"))
		if err != nil {
			return false
		}
		var h engine.HeartbeatEntry
		return json.Unmarshal(e.Value(), &h) == nil && h.DetailsAttempt == 1 && string(h.Details) == `{"done":7}`
	}, 5*time.Second, 20*time.Millisecond)

	kill()
	killed := time.Now()
	startWorkerWith(t, srv, reg(), worker.Config{AckWait: ackWait})

	var out progress
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.Result(ctx, runID, &out))
	took := time.Since(killed)
	require.Equal(t, progress{Done: 7}, <-read, "the retry reads the last heartbeat's details")
	require.Equal(t, progress{Done: 8}, out)
	require.Less(t, took, ackWait/4, "retried within the heartbeat timeout, not after the ack wait")
	t.Logf("killed worker's step retried and completed %s after the kill (heartbeat timeout %s, ack wait %s)", took.Round(time.Millisecond), hbTimeout, ackWait)

	hist, err := c.History(t.Context(), runID, 0)
	require.NoError(t, err)
	tos := timeoutsOf(hist)
	require.Len(t, tos, 1)
	require.Equal(t, event.TimeoutHeartbeat, tos[0].Timeout)
	require.Equal(t, event.TimeoutHeartbeat, tos[0].Error.Kind)
	require.Equal(t, 1, tos[0].Attempt)
	require.True(t, tos[0].Retryable)
	require.False(t, tos[0].Final)
}

// A step that outlives its start-to-close timeout has its context cancelled by its worker, and
// the attempt fails with the timeout's kind; the retry succeeds.
func TestStartToCloseTimeout(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startServices(t, srv)
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "slow", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if out := ctx.StepOutput("s"); out != nil {
			return ctx.Complete(out), nil
		}
		return ctx.ScheduleStep("s", "slow", nil, flow.WithStartToCloseTimeout(300*time.Millisecond),
			flow.WithRetry(flow.RetryPolicy{MaxAttempts: 2, InitialInterval: 10 * time.Millisecond})), nil
	})
	flow.RegisterStep(reg, "slow", func(ctx context.Context, _ any) (int, error) {
		info, _ := flow.StepInfoFrom(ctx)
		if info.Attempt == 1 {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return info.Attempt, nil
	})
	startWorkerWith(t, srv, reg, worker.Config{})
	c := newClient(t, srv)
	require.Equal(t, 2, runToEnd[int](t, c, "slow", "slow-1", 20*time.Second))
	hist, err := c.History(t.Context(), "slow-1", 0)
	require.NoError(t, err)
	tos := timeoutsOf(hist)
	require.Len(t, tos, 1)
	require.Equal(t, event.TimeoutStartToClose, tos[0].Timeout)
	require.Equal(t, 1, tos[0].Attempt)
}

// An attempt that no worker starts within its schedule-to-start timeout (here: the worker's only
// step slot is taken by its sibling) fails with that timeout, fired by the scheduler.
func TestScheduleToStartTimeout(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startServices(t, srv)
	release := make(chan struct{})
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "queued", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.StepOutput("hold") != nil {
			var f *flow.StepFailure
			if errors.As(ctx.StepError("late"), &f) {
				return ctx.Complete(f.Kind), nil
			}
			return ctx.Complete("late ran"), nil
		}
		return ctx.ScheduleSteps(
			flow.Step{ID: "hold", Name: "hold"},
			flow.Step{ID: "late", Name: "late", ScheduleToStartTimeout: 500 * time.Millisecond,
				Retry: &flow.RetryPolicy{MaxAttempts: 1, OnExhaustion: flow.ExhaustionReturnError}},
		), nil
	})
	flow.RegisterStep(reg, "hold", func(ctx context.Context, _ any) (int, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return 1, nil
	})
	flow.RegisterStep(reg, "late", func(context.Context, any) (int, error) { return 2, nil })
	startWorkerWith(t, srv, reg, worker.Config{StepConcurrency: 1})
	c := newClient(t, srv)
	runID, err := c.Start(t.Context(), "queued", nil, &flow.StartOptions{RunID: "queued-1"})
	require.NoError(t, err)
	historyUntil(t, c, runID, 15*time.Second, "late times out", func(h []event.Envelope) bool { return len(timeoutsOf(h)) == 1 })
	close(release)
	var out string
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.Result(ctx, runID, &out))
	require.Equal(t, event.TimeoutScheduleToStart, out)
}

// A run's cancellation reaches a heartbeating step: its heartbeat (or the worker's refresher)
// learns it from the run's history and cancels the step's context, with the reason as cause.
// The workflow takes charge of its cancellation (it calls CancelRequested) and waits for the
// step to stop, so that nothing but the heartbeat tells the step.
func TestCancelThroughHeartbeat(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startServices(t, srv)
	var mu sync.Mutex
	var cause error
	running := make(chan struct{}, 1)
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "cancellable", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.CancelRequested() && ctx.StepError("w") != nil {
			return ctx.Cancel("the step stopped"), nil
		}
		return ctx.ScheduleStep("w", "w", nil, flow.WithHeartbeatTimeout(10*time.Second),
			flow.WithRetry(flow.RetryPolicy{MaxAttempts: 1, OnExhaustion: flow.ExhaustionReturnError})), nil
	})
	flow.RegisterStep(reg, "w", func(ctx context.Context, _ any) (int, error) {
		running <- struct{}{}
		for i := 0; ; i++ {
			_ = flow.Heartbeat(ctx, i)
			select {
			case <-ctx.Done():
				mu.Lock()
				cause = context.Cause(ctx)
				mu.Unlock()
				return 0, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	startWorkerWith(t, srv, reg, worker.Config{})
	c := newClient(t, srv)
	runID, err := c.Start(t.Context(), "cancellable", nil, &flow.StartOptions{RunID: "cancel-1"})
	require.NoError(t, err)
	<-running
	_, err = c.Cancel(t.Context(), runID, "no longer needed")
	require.NoError(t, err)
	hist := historyUntil(t, c, runID, 15*time.Second, "the run ends", ended)
	require.Equal(t, event.TypeRunCancelled, hist[len(hist)-1].Type())
	mu.Lock()
	defer mu.Unlock()
	require.Error(t, cause)
	require.True(t, strings.Contains(cause.Error(), "cancellation of run") && strings.Contains(cause.Error(), "no longer needed"), "cause: %v", cause)
}

// A run timeout ends the run with run.failed naming it; an execution timeout spans
// continue-as-new: the last generation inherits the first's deadline and fails at it.
func TestRunAndExecutionTimeouts(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startServices(t, srv)
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "sleepy", func(ctx *flow.Context, gen int) (flow.Decision, error) {
		if gen < 2 {
			return ctx.ContinueAsNew(gen + 1), nil
		}
		return ctx.Sleep("nap", time.Hour), nil
	})
	flow.RegisterWorkflow(reg, "defaulted", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		return ctx.Sleep("nap", time.Hour), nil
	}, flow.WithRunTimeouts(0, 700*time.Millisecond))
	flow.RegisterWorkflow(reg, "guardian", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		return ctx.StartChild("kid", "sleepy", 2, flow.WithCancelPolicy(event.CancelPolicyRequest)), nil
	})
	startWorkerWith(t, srv, reg, worker.Config{})
	c := newClient(t, srv)

	failedWith := func(t *testing.T, runID, kind string) *event.RunStarted {
		hist := historyUntil(t, c, runID, 15*time.Second, "the run ends", ended)
		f, ok := hist[len(hist)-1].Payload.(*event.RunFailed)
		require.True(t, ok, "%v", types(hist))
		require.Equal(t, kind, f.Error.Kind)
		require.Equal(t, event.CauseTimeout, f.Cause)
		return hist[0].Payload.(*event.RunStarted)
	}
	t.Run("Run", func(t *testing.T) {
		t.Parallel()
		_, err := c.Start(t.Context(), "sleepy", 2, &flow.StartOptions{RunID: "rt-1", RunTimeout: 500 * time.Millisecond})
		require.NoError(t, err)
		st := failedWith(t, "rt-1", event.TimeoutRun)
		require.Equal(t, event.Duration(500*time.Millisecond), st.Timeouts.Run)
	})
	t.Run("DefinitionDefault", func(t *testing.T) {
		t.Parallel()
		_, err := c.Start(t.Context(), "defaulted", nil, &flow.StartOptions{RunID: "def-1"})
		require.NoError(t, err)
		failedWith(t, "def-1", event.TimeoutRun)
	})
	t.Run("ChildOfATimedOutParent", func(t *testing.T) {
		t.Parallel()
		_, err := c.Start(t.Context(), "guardian", nil, &flow.StartOptions{RunID: "guard-1", RunTimeout: 700 * time.Millisecond})
		require.NoError(t, err)
		failedWith(t, "guard-1", event.TimeoutRun)
		kid := historyUntil(t, c, "guard-1=kid", 15*time.Second, "the child ends", ended)
		require.Equal(t, event.TypeRunCancelled, kid[len(kid)-1].Type(), "a request_cancel child is cancelled as when its parent fails: %v", types(kid))
	})
	t.Run("ExecutionAcrossContinueAsNew", func(t *testing.T) {
		t.Parallel()
		_, err := c.Start(t.Context(), "sleepy", 0, &flow.StartOptions{RunID: "et-1", ExecutionTimeout: 1500 * time.Millisecond, RunTimeout: time.Hour})
		require.NoError(t, err)
		first := historyUntil(t, c, "et-1", 15*time.Second, "continued", ended)
		require.Equal(t, event.TypeRunContinuedAsNew, first[len(first)-1].Type())
		deadline := first[0].Payload.(*event.RunStarted).Timeouts.ExecutionDeadline
		last := failedWith(t, "et-1=2", event.TimeoutExecution)
		require.Equal(t, 2, last.Generation)
		require.True(t, deadline.Equal(last.Timeouts.ExecutionDeadline), "inherited %s, want %s", last.Timeouts.ExecutionDeadline, deadline)
		require.Equal(t, event.Duration(time.Hour), last.Timeouts.Run, "the run timeout carries over, counted from each run's start")
	})
}

// connectAs returns a connection to srv whose request inboxes start with prefix: each
// JetStream write it makes (a publish with a reply subject) names it.
func connectAs(t *testing.T, srv *natsserver.Server, prefix string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL(), natsconn.SyncQueue, nats.CustomInboxPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// A step that is stuck (it never heartbeats) is timed out although its worker lives; a second
// watcher, started after the first timed the attempt out, checks the entry once against history
// and appends nothing. Neither writes FLOW_HEARTBEATS: every write to the bucket comes from the
// worker's connection (the workers are its one writer).
func TestSchedulerNeverWritesHeartbeats(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	spy := spyOn(t, srv, streams.HeartbeatsBucket, "the worker")

	startHistoryAndIngress(t, srv)
	s1 := startScheduler(t, connectAs(t, srv, "_INBOX.scheduler1"))

	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "stuck", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		var f *flow.StepFailure
		if errors.As(ctx.StepError("s"), &f) {
			return ctx.Complete(f.Kind), nil
		}
		return ctx.ScheduleStep("s", "stuck", nil, flow.WithHeartbeatTimeout(time.Second),
			flow.WithRetry(flow.RetryPolicy{MaxAttempts: 1, OnExhaustion: flow.ExhaustionReturnError})), nil
	})
	flow.RegisterStep(reg, "stuck", func(ctx context.Context, _ any) (int, error) {
		<-ctx.Done() // never heartbeats; its context is cancelled once the timeout is recorded
		return 0, ctx.Err()
	})
	startWorkerWith(t, srv, reg, worker.Config{Conn: connectAs(t, srv, "_INBOX.worker")})
	c := newClient(t, srv)
	require.Equal(t, event.TimeoutHeartbeat, runToEnd[string](t, c, "stuck", "stuck-1", 30*time.Second))
	require.Eventually(t, func() bool { return s1.TimedOut() == 1 && s1.BeatChecks() == 1 }, 15*time.Second, 20*time.Millisecond)
	require.NoError(t, s1.Stop())
	spy.from(t, srv, "_INBOX.worker.")

	s2 := startScheduler(t, connectAs(t, srv, "_INBOX.scheduler2"))
	require.Eventually(t, func() bool { return s2.BeatChecks() == 1 }, 15*time.Second, 20*time.Millisecond,
		"the second watcher checks the entry's passed deadline against history")
	hist, err := c.History(t.Context(), "stuck-1", 0)
	require.NoError(t, err)
	require.Len(t, timeoutsOf(hist), 1, "the timeout was appended once: %v", types(hist))
	require.Zero(t, s2.TimedOut(), "the second watcher found the attempt settled")

	spy.from(t, srv, "_INBOX.worker.")
}
