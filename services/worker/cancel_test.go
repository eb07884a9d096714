package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/worker"
)

// attemptProbe is what a test sees of one attempt of the "slow" step: started when it runs, done
// when its context is cancelled, and release to let it return.
type attemptProbe struct {
	started, cancelled, returned, release chan struct{}
}

type attemptProbes struct{ m sync.Map }

func (p *attemptProbes) of(runID string) *attemptProbe {
	v, _ := p.m.LoadOrStore(runID, &attemptProbe{started: make(chan struct{}), cancelled: make(chan struct{}),
		returned: make(chan struct{}), release: make(chan struct{})})
	return v.(*attemptProbe)
}

type cancelIn struct {
	Policy event.Cancellation `json:"policy"`
}

// registerCancel registers "cancel-step", a workflow that schedules step "slow", waits for a
// signal "stop" and then cancels the step with the policy of its input, and "cancel-child", which
// does the same to a child run of "sleeper" (a workflow that waits for signal "go").
func registerCancel(ps *attemptProbes) func(*flow.Registry) {
	return func(reg *flow.Registry) {
		flow.RegisterStep(reg, "slow", func(ctx context.Context, _ any) (string, error) {
			info, _ := flow.StepInfoFrom(ctx)
			p := ps.of(info.RunID)
			close(p.started)
			defer close(p.returned)
			select {
			case <-ctx.Done():
				close(p.cancelled)
				<-p.release
				return "", ctx.Err()
			case <-p.release:
				return "finished", nil
			}
		})
		flow.RegisterWorkflow(reg, "cancel-step", func(ctx *flow.Context, in cancelIn) (flow.Decision, error) {
			if ctx.Snapshot().Steps["slow"] == nil {
				return ctx.ScheduleStep("slow", "slow", nil), nil
			}
			if ctx.Signal("stop") == nil && !ctx.StepSettled("slow") {
				return ctx.AwaitSignal("stop", "stop"), nil
			}
			if !ctx.StepSettled("slow") {
				return ctx.CancelStep("slow", in.Policy), nil
			}
			var status string
			if err := ctx.StepError("slow"); err != nil {
				status = err.Error()
			} else {
				status = string(ctx.StepOutput("slow"))
			}
			return ctx.Complete(status), nil
		})
		flow.RegisterWorkflow(reg, "sleeper", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			if ctx.Signal("go") == nil {
				return ctx.AwaitSignal("go", "go"), nil
			}
			return ctx.Complete("woke"), nil
		})
		flow.RegisterWorkflow(reg, "cancel-child", func(ctx *flow.Context, in cancelIn) (flow.Decision, error) {
			if ctx.Snapshot().Children["kid"] == nil {
				return ctx.StartChild("kid", "sleeper", nil), nil
			}
			if ctx.Signal("stop") == nil {
				return ctx.AwaitSignal("stop", "stop"), nil
			}
			r := ctx.Child("kid")
			if r == nil {
				return ctx.CancelChild("kid", in.Policy), nil
			}
			return ctx.Complete(string(r.Outcome)), nil
		})
	}
}

// runningContext returns a context that ends d from now, or with t. A parallel test or subtest
// takes it after t.Parallel, so that its deadline counts from when it runs: a parallel subtest
// waits for a free slot (-test.parallel, GOMAXPROCS by default) behind the package's other
// parallel tests, and a deadline taken by its parent before that wait can run out before the
// subtest does anything.
func runningContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func typeNames(hist []event.Envelope) []string {
	var ts []string
	for _, e := range hist {
		ts = append(ts, string(e.Type()))
	}
	return ts
}

// waitFor polls the run's history until cond holds, or fails the test at ctx's deadline.
func waitFor(t *testing.T, ctx context.Context, c *flow.Client, runID string, cond func([]event.Envelope) bool) []event.Envelope {
	t.Helper()
	for {
		hist, err := c.History(ctx, runID, 0)
		if err == nil && cond(hist) {
			return hist
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %q: condition not met before the deadline; history %v (err %v)", runID, typeNames(hist), err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func has(typ event.Type) func([]event.Envelope) bool {
	return func(h []event.Envelope) bool {
		for _, e := range h {
			if e.Type() == typ {
				return true
			}
		}
		return false
	}
}

func last[T event.Payload](hist []event.Envelope) T {
	var zero T
	for i := len(hist) - 1; i >= 0; i-- {
		if p, ok := hist[i].Payload.(T); ok {
			return p
		}
	}
	return zero
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestCancelStep cancels a running step's attempt with each policy on real NATS: try_cancel
// settles it at once and cancels the attempt's context; wait_cancelled cancels the context and
// settles the step only when the attempt returns; abandon settles it at once and leaves the
// context alone, even after the run ended, and ignores the attempt's result.
func TestCancelStep(t *testing.T) {
	t.Parallel()
	ps := &attemptProbes{}
	b := setup(t, registerCancel(ps))
	start := func(t *testing.T, ctx context.Context, policy event.Cancellation) (string, *attemptProbe) {
		runID, err := b.client.Start(ctx, "cancel-step", cancelIn{Policy: policy}, &flow.StartOptions{RunID: "cancel-step-" + strings.ReplaceAll(string(policy), "_", "-")})
		require.NoError(t, err)
		p := ps.of(runID)
		<-p.started
		waitFor(t, ctx, b.client, runID, has(event.TypeSignalAwaited))
		_, err = b.client.Signal(ctx, runID, "stop", nil, &flow.DeliveryOptions{DeliveryID: "stop-1"})
		require.NoError(t, err)
		return runID, p
	}

	// try_cancel and abandon settle the step at once: the workflow goes on while the attempt
	// runs.
	for _, tt := range []struct {
		name   string
		policy event.Cancellation
		// attempt checks what the attempt sees once the run ended, and lets it return.
		attempt func(t *testing.T, p *attemptProbe)
		// settled checks the run's history once the attempt was let go.
		settled func(t *testing.T, hist []event.Envelope)
	}{
		{"TryCancel", flow.TryCancel, func(t *testing.T, p *attemptProbe) {
			<-p.cancelled // the attempt's context is cancelled
			close(p.release)
		}, func(t *testing.T, hist []event.Envelope) {
			c := last[*event.StepCancelled](hist)
			require.Equal(t, event.CancelTry, c.Cancellation)
			require.True(t, c.Steps[0].SideEffectUnknown, "the attempt was in flight")
			require.NotContains(t, typeNames(hist), string(event.TypeStepCancelRequested))
		}},
		{"Abandon", flow.Abandon, func(t *testing.T, p *attemptProbe) {
			require.False(t, closed(p.cancelled), "an abandoned attempt is not told, even once its run ended")
			close(p.release) // it returns "finished", which is ignored
			<-p.returned
			require.False(t, closed(p.cancelled))
		}, func(t *testing.T, hist []event.Envelope) {
			require.Equal(t, event.CancelAbandon, last[*event.StepCancelled](hist).Cancellation)
			require.NotContains(t, typeNames(hist), string(event.TypeStepCompleted))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := runningContext(t, 30*time.Second)
			runID, p := start(t, ctx, tt.policy)
			var out string
			require.NoError(t, b.client.Result(ctx, runID, &out), "the workflow goes on at once")
			require.Contains(t, out, "cancelled")
			tt.attempt(t, p)
			hist, err := b.client.History(ctx, runID, 0)
			require.NoError(t, err)
			require.Empty(t, core.Check(runID, hist))
			tt.settled(t, hist)
		})
	}

	t.Run("WaitCancelled", func(t *testing.T) {
		t.Parallel()
		ctx := runningContext(t, 30*time.Second)
		runID, p := start(t, ctx, flow.WaitCancelled)
		<-p.cancelled // asked to cancel: its context is done, and it has not returned yet
		hist := waitFor(t, ctx, b.client, runID, has(event.TypeStepCancelRequested))
		require.NotContains(t, typeNames(hist), string(event.TypeStepCancelled), "the step settles only when the attempt ends")
		s, err := b.client.Snapshot(ctx, runID)
		require.NoError(t, err)
		require.False(t, s.Terminal())
		require.True(t, s.Steps["slow"].CancelPending())
		close(p.release) // the attempt returns ctx.Err(): it reports itself cancelled
		var out string
		require.NoError(t, b.client.Result(ctx, runID, &out))
		require.Contains(t, out, "cancelled")
		hist, err = b.client.History(ctx, runID, 0)
		require.NoError(t, err)
		require.Empty(t, core.Check(runID, hist))
		c := last[*event.StepCancelled](hist)
		require.Equal(t, event.CancelWait, c.Cancellation)
		require.False(t, c.Steps[0].SideEffectUnknown, "the attempt ended and said so")
		ts := typeNames(hist)
		require.Less(t, indexOf(ts, "step.cancel_requested"), indexOf(ts, "step.cancelled"))
	})
}

func indexOf(ts []string, typ string) int {
	for i, t := range ts {
		if t == typ {
			return i
		}
	}
	return -1
}

// TestCancelChild cancels a running child with each policy on real NATS: try_cancel settles the
// child at once and its run is asked to cancel (and ends cancelled); wait_cancelled asks its run
// to cancel and settles the child when that run ended; abandon settles it at once and leaves its
// run alone, which goes on and completes later without touching the ended parent.
func TestCancelChild(t *testing.T) {
	t.Parallel()
	b := setup(t, registerCancel(&attemptProbes{}))
	start := func(t *testing.T, ctx context.Context, policy event.Cancellation) (string, string) {
		runID, err := b.client.Start(ctx, "cancel-child", cancelIn{Policy: policy}, &flow.StartOptions{RunID: "cancel-child-" + strings.ReplaceAll(string(policy), "_", "-")})
		require.NoError(t, err)
		kid := event.ChildRunID(runID, "kid")
		waitFor(t, ctx, b.client, kid, has(event.TypeSignalAwaited))
		waitFor(t, ctx, b.client, runID, has(event.TypeSignalAwaited))
		_, err = b.client.Signal(ctx, runID, "stop", nil, &flow.DeliveryOptions{DeliveryID: "stop-1"})
		require.NoError(t, err)
		return runID, kid
	}
	for _, tt := range []struct {
		name   string
		policy event.Cancellation
		// then checks what the policy did once the parent ended cancelled.
		then func(t *testing.T, ctx context.Context, runID, kid string)
	}{
		{"TryCancel", flow.TryCancel, func(t *testing.T, ctx context.Context, runID, kid string) {
			kh := waitFor(t, ctx, b.client, kid, has(event.TypeRunCancelled)) // asked, from the parent's history
			require.Contains(t, typeNames(kh), string(event.TypeRunCancelRequested))
			hist, err := b.client.History(ctx, runID, 0)
			require.NoError(t, err)
			settled := last[*event.ChildSettled](hist)
			require.Equal(t, event.CancelTry, settled.Cancellation)
			require.Equal(t, 1, countType(hist, event.TypeChildSettled), "the child's own end is not recorded again")
		}},
		{"WaitCancelled", flow.WaitCancelled, func(t *testing.T, ctx context.Context, runID, kid string) {
			hist, err := b.client.History(ctx, runID, 0)
			require.NoError(t, err)
			ts := typeNames(hist)
			require.Less(t, indexOf(ts, "child.cancel_requested"), indexOf(ts, "child.settled"))
			settled := last[*event.ChildSettled](hist)
			require.Empty(t, settled.Cancellation, "settled by the child's end")
			require.Equal(t, event.OutcomeCancelled, settled.Outcome)
			kh, err := b.client.History(ctx, kid, 0)
			require.NoError(t, err)
			require.Equal(t, event.TypeRunCancelled, kh[len(kh)-1].Type(), "the child's run ended before the parent saw it settle")
		}},
		{"Abandon", flow.Abandon, func(t *testing.T, ctx context.Context, runID, kid string) {
			kh, err := b.client.History(ctx, kid, 0)
			require.NoError(t, err)
			require.NotContains(t, typeNames(kh), string(event.TypeRunCancelRequested), "an abandoned child is not told, not even when its parent ends")
			_, err = b.client.Signal(ctx, kid, "go", nil, &flow.DeliveryOptions{DeliveryID: "go-1"})
			require.NoError(t, err)
			var kout string
			require.NoError(t, b.client.Result(ctx, kid, &kout))
			require.Equal(t, "woke", kout)
			hist, err := b.client.History(ctx, runID, 0)
			require.NoError(t, err)
			require.Equal(t, 1, countType(hist, event.TypeChildSettled))
			require.Equal(t, event.CancelAbandon, last[*event.ChildSettled](hist).Cancellation)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := runningContext(t, 30*time.Second)
			runID, kid := start(t, ctx, tt.policy)
			var out string
			require.NoError(t, b.client.Result(ctx, runID, &out))
			require.Equal(t, "cancelled", out)
			tt.then(t, ctx, runID, kid)
			for _, id := range []string{runID, kid} {
				hist, err := b.client.History(ctx, id, 0)
				require.NoError(t, err)
				require.Empty(t, core.Check(id, hist), "run %q", id)
			}
		})
	}
}

func countType(hist []event.Envelope, typ event.Type) int {
	n := 0
	for _, e := range hist {
		if e.Type() == typ {
			n++
		}
	}
	return n
}

// TestChildRetry runs a child whose first run fails and whose second succeeds, under a retry
// policy, on real NATS: the parent records child.retry_scheduled and child.retry_fired, starts
// the second attempt as "<child run>=_2" after the backoff, and sees child.settled once, with
// the second run's result.
func TestChildRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "flaky", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			if !strings.HasSuffix(ctx.RunID(), "=_2") {
				return ctx.Fail(errors.New("first attempt fails")), nil
			}
			return ctx.Complete("ok from " + ctx.RunID()), nil
		})
		flow.RegisterWorkflow(reg, "retrying-parent", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			r := ctx.Child("kid")
			if r == nil {
				return ctx.StartChild("kid", "flaky", nil, flow.WithChildRetry(flow.RetryPolicy{MaxAttempts: 3, InitialInterval: 50 * time.Millisecond})), nil
			}
			if r.Err != nil {
				return ctx.Fail(r.Err), nil
			}
			return ctx.Complete(r.Output), nil
		})
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	runID, err := b.client.Start(ctx, "retrying-parent", nil, &flow.StartOptions{RunID: "retrying-parent"})
	require.NoError(t, err)
	var out string
	require.NoError(t, b.client.Result(ctx, runID, &out))
	require.Equal(t, "ok from retrying-parent=kid=_2", out)

	hist, err := b.client.History(ctx, runID, 0)
	require.NoError(t, err)
	require.Empty(t, core.Check(runID, hist))
	ts := typeNames(hist)
	require.Less(t, indexOf(ts, "child.retry_scheduled"), indexOf(ts, "child.retry_fired"))
	require.Less(t, indexOf(ts, "child.retry_fired"), indexOf(ts, "child.settled"))
	require.Equal(t, 1, countType(hist, event.TypeChildSettled))
	rs := last[*event.ChildRetryScheduled](hist)
	require.Equal(t, "retrying-parent=kid", rs.FailedRunID)
	require.Equal(t, 2, rs.Attempt)
	settled := last[*event.ChildSettled](hist)
	require.Equal(t, "retrying-parent=kid=_2", settled.RunID)
	require.Equal(t, event.OutcomeCompleted, settled.Outcome)

	first, err := b.client.History(ctx, "retrying-parent=kid", 0)
	require.NoError(t, err)
	require.Equal(t, event.TypeRunFailed, first[len(first)-1].Type())
	second, err := b.client.History(ctx, "retrying-parent=kid=_2", 0)
	require.NoError(t, err)
	started := second[0].Payload.(*event.RunStarted)
	require.Equal(t, &event.ParentRef{RunID: runID, ChildID: "kid", Attempt: 2}, started.Parent)
	require.GreaterOrEqual(t, second[0].Time.Sub(first[len(first)-1].Time), 50*time.Millisecond, "started after the backoff")
	require.Empty(t, core.Check("retrying-parent=kid=_2", second))
}

// TestChildCancelFromHistory: the parent's worker fails right after committing a try_cancel of
// its child, before it asks the child to cancel (fault AfterDecisionBeforeChildCancel): the
// child's run.cancel_requested still follows from the parent's history (the history service's
// consumer applies the commit), and the parent's redelivered task finishes the parent.
func TestChildCancelFromHistory(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startHistoryAndIngress(t, srv)
	reg := flow.NewRegistry(nil)
	registerCancel(&attemptProbes{})(reg)
	inj := &fault.Injector{}
	inj.Arm(fault.AfterDecisionBeforeChildCancel, fault.Fail, 0, 1)
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet, Faults: inj}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	c, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)

	runID, err := c.Start(ctx, "cancel-child", cancelIn{Policy: flow.TryCancel}, &flow.StartOptions{RunID: "lost-fast-path"})
	require.NoError(t, err)
	kid := event.ChildRunID(runID, "kid")
	waitFor(t, ctx, c, kid, has(event.TypeSignalAwaited))
	waitFor(t, ctx, c, runID, has(event.TypeSignalAwaited))
	_, err = c.Signal(ctx, runID, "stop", nil, &flow.DeliveryOptions{DeliveryID: "stop-1"})
	require.NoError(t, err)
	var out string
	require.NoError(t, c.Result(ctx, runID, &out))
	require.Equal(t, "cancelled", out)
	kh := waitFor(t, ctx, c, kid, has(event.TypeRunCancelled))
	require.Equal(t, 1, inj.Hits(fault.AfterDecisionBeforeChildCancel), "the fast path failed once")
	require.Equal(t, 1, countType(kh, event.TypeRunCancelRequested))
	require.Empty(t, core.Check(kid, kh))
}
