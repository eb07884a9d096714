package maintenance_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/maintenance"
	"github.com/flowrun/flow/internal/natstest"
)

// A job runs in the one replica that holds its lease: the follower runs none until the leader
// stops and releases the lease, then takes over at once.
func TestLeaseRunsTheJobInTheLeaderOnly(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	leases, err := maintenance.OpenLeases(t.Context(), natstest.JetStream(t, srv))
	require.NoError(t, err)
	var running [2]atomic.Int32
	replica := func(i int, name string) (*maintenance.Lease, context.CancelFunc, *sync.WaitGroup) {
		l := &maintenance.Lease{Leases: leases, Key: "test", Holder: name, Role: name, Doing: "testing", TTL: time.Second,
			Backoff: 10 * time.Millisecond, Logger: natstest.Logger()}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() {
			l.Run(ctx, maintenance.JobFunc(func(ctx context.Context) error {
				running[i].Add(1)
				defer running[i].Add(-1)
				<-ctx.Done()
				return nil
			}))
		})
		t.Cleanup(func() { cancel(); wg.Wait() })
		return l, cancel, &wg
	}
	a, stopA, waitA := replica(0, "a")
	require.Eventually(t, a.Leading, 10*time.Second, time.Millisecond)
	b, _, _ := replica(1, "b")
	time.Sleep(500 * time.Millisecond)
	require.False(t, b.Leading(), "the follower waits")
	require.EqualValues(t, 1, running[0].Load())
	require.Zero(t, running[1].Load())
	holder, err := leases.Holder(t.Context(), "test")
	require.NoError(t, err)
	require.Equal(t, "a", holder)

	stopA()
	waitA.Wait()
	require.False(t, a.Leading())
	require.Zero(t, running[0].Load())
	require.Eventually(t, b.Leading, 10*time.Second, time.Millisecond, "the follower takes the released lease at its next try")
	require.Eventually(t, func() bool { return running[1].Load() == 1 }, 2*time.Second, time.Millisecond)
}

// A job that fails gives its lease up and competes again after its backoff; one that dies
// (Dies) stops competing without releasing it.
func TestLeaseFailedAndDeadJobs(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	leases, err := maintenance.OpenLeases(t.Context(), natstest.JetStream(t, srv))
	require.NoError(t, err)
	errDie := errors.New("die")
	var runs atomic.Int32
	l := &maintenance.Lease{Leases: leases, Key: "test", Holder: "a", Role: "a", Doing: "testing", TTL: time.Second,
		Backoff: 10 * time.Millisecond, Logger: natstest.Logger(), Dies: func(err error) bool { return errors.Is(err, errDie) }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(t.Context(), maintenance.JobFunc(func(context.Context) error {
			if runs.Add(1) < 3 {
				return errors.New("fail")
			}
			return errDie
		}))
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not die")
	}
	require.EqualValues(t, 3, runs.Load(), "run again after each failure")
	holder, err := leases.Holder(t.Context(), "test")
	require.NoError(t, err)
	require.Equal(t, "a", holder, "a job that dies keeps its lease until it expires")
}

// Periodic calls its pass at once and then every interval, until ctx ends.
func TestPeriodic(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var passes atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- maintenance.Periodic(10*time.Millisecond, func(context.Context) { passes.Add(1) }).Run(ctx)
	}()
	require.Eventually(t, func() bool { return passes.Load() >= 3 }, 5*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}
