package composetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
)

// The load: runs of the example workflows, started through the ingress, one kind after the other.
const (
	runs    = 200
	senders = 16
	// killAt is the number of started runs at which a NATS node and a worker are killed; they
	// are started again outage later (the runs go on meanwhile: starts, steps, timers, children).
	killAt = 50
	outage = 8 * time.Second
	// endWithin bounds the wait for every run to end once all are started: they take seconds.
	endWithin = 3 * time.Minute
)

// killed are the containers the chaos kills: one NATS node (the streams have 3 replicas, so the
// two left keep a quorum) and one of the two workers.
var killed = []string{"nats-2", "worker-1"}

// job is one run to start.
type job struct {
	definition, id string
	input          any
}

// jobs returns the load: order, fanout, reminder (a 2s timer), approval (signalled by the test)
// and parent (two children sleeping 2s each), in turn.
func jobs() []job {
	js := make([]job, runs)
	for i := range js {
		id := fmt.Sprintf("%03d", i)
		switch i % 5 {
		case 0:
			js[i] = job{"order", "order-" + id, map[string]any{"sku": "sku-" + id, "qty": 1 + i%3}}
		case 1:
			js[i] = job{"fanout", "fanout-" + id, map[string]any{"items": 4}}
		case 2:
			js[i] = job{"reminder", "reminder-" + id, map[string]any{"who": "r" + id, "after": "2s"}}
		case 3:
			js[i] = job{"approval", "approval-" + id, map[string]any{"who": "a" + id, "timeout": "10m"}}
		case 4:
			js[i] = job{"parent", "parent-" + id, map[string]any{"sleep": "2s"}}
		}
	}
	return js
}

// TestComposeChaos brings the docker compose stack up, starts 200 runs of mixed examples through
// the ingress, kills a NATS node and a worker mid-load and starts them again, and checks that
// every run (and every child run) completed with a history that passes core.Check.
func TestComposeChaos(t *testing.T) {
	compose := requireDocker(t)
	began := time.Now()
	// One deadline for the whole test, well inside go test's default 10 minutes, so that the
	// teardown in t.Cleanup always runs (a test that hits go test's timeout panics without it).
	deadline := began.Add(8 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Add(-2*time.Minute).Before(deadline) {
		deadline = d.Add(-2 * time.Minute)
	}
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	s := newStack(t, compose)
	t.Logf("project %s, images flowrun/{flow,nats}:%s, ingress %s, history %s", s.project, s.tag, s.ingress, s.history)

	phase := time.Now()
	s.buildImages(ctx)
	t.Logf("images built in %s", time.Since(phase).Round(time.Second))
	phase = time.Now()
	s.up(ctx)
	s.waitHealthy(ctx)
	t.Logf("stack up and healthy in %s", time.Since(phase).Round(time.Second))

	phase = time.Now()
	h := newHTTP(s)
	load := jobs()
	var started atomic.Int64
	kill := make(chan struct{})
	chaosDone := make(chan error, 1)
	go func() { chaosDone <- chaos(ctx, s, kill) }()
	work := make(chan job)
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for j := range work {
				if err := h.start(ctx, j); err != nil {
					errs <- err
					return
				}
				// The approval is sent at once: a signal that comes before the run waits for it
				// is kept.
				if j.definition == "approval" {
					if err := h.signal(ctx, j.id, "approve", map[string]string{"note": "ok " + j.id}); err != nil {
						errs <- err
						return
					}
				}
				if started.Add(1) == killAt {
					close(kill)
				}
			}
		})
	}
feed:
	for _, j := range load {
		select {
		case work <- j:
		case err := <-errs:
			close(work)
			t.Fatal(err)
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, ctx.Err(), "starting the runs")
	require.NoError(t, <-chaosDone, "killing and restarting %v", killed)
	t.Logf("%d runs started in %s (%d requests retried); %v killed after %d starts and started again %s later",
		runs, time.Since(phase).Round(time.Second), h.retries.Load(), killed, killAt, outage)

	phase = time.Now()
	var all []string
	for _, j := range load {
		all = append(all, j.id)
		if j.definition == "parent" {
			all = append(all, j.id+"=request_cancel", j.id+"=abandon")
		}
	}
	endCtx, cancelEnd := context.WithTimeout(ctx, endWithin)
	defer cancelEnd()
	snaps := h.awaitEnded(endCtx, t, all)
	t.Logf("%d runs (children included) ended in %s", len(all), time.Since(phase).Round(time.Second))
	for _, id := range all {
		snap := snaps[id]
		require.Equal(t, core.StatusCompleted, snap.Status, "run %s completed: %+v", id, snap.Outcome)
		if strings.HasPrefix(id, "approval-") {
			var res struct {
				Approved bool `json:"approved"`
			}
			require.NoError(t, json.Unmarshal(snap.Outcome.Output, &res))
			require.True(t, res.Approved, "run %s was approved by the test's signal, not timed out", id)
		}
		hist, err := h.history(ctx, id)
		require.NoError(t, err)
		require.NotEmpty(t, hist)
		require.Empty(t, core.Check(id, hist), "run %s's history passes the invariants checker", id)
	}
	t.Logf("every history checked; the test took %s", time.Since(began).Round(time.Second))
}

// chaos kills the containers of killed when kill is closed, and starts them again outage later.
func chaos(ctx context.Context, s *stack, kill <-chan struct{}) error {
	select {
	case <-kill:
	case <-ctx.Done():
		return ctx.Err()
	}
	var errs []error
	for _, svc := range killed {
		errs = append(errs, s.docker(ctx, "kill", svc))
	}
	select {
	case <-time.After(outage):
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, svc := range killed {
		errs = append(errs, s.docker(ctx, "start", svc))
	}
	return errors.Join(errs...)
}
