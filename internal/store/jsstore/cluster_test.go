package jsstore_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/store/storetest"
	"github.com/flowrun/flow/pkg/event"
)

// TestClusterConformance runs the conformance suite on a 3-server cluster with R3 streams, once
// every replica answers direct gets, with its stores connected to the servers in turn.
func TestClusterConformance(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	c.WaitForDirectGets(t, streams.History)
	var next atomic.Int64
	storetest.Exercise(t, func(t *testing.T) store.EventStore {
		s, err := jsstore.New(t.Context(), c.JetStream(t, int(next.Add(1))%c.Len()), nil)
		require.NoError(t, err)
		return s
	})
}

// TestFollowerReadsCanLag shows that a store may not see an append acknowledged a moment before.
// Load reads with direct gets. Every replica of FLOW_HISTORY joins the queue group that answers
// them, and NATS hands a client's request to any member, wherever the client is connected. The
// leader acknowledges an append once a quorum has stored it and it has applied it; a follower
// applies it once the leader's next message tells it the append committed, so a direct get it
// answers in between misses the append.
//
// A store on a connection to the leader appends to many runs; right after each append, stores on
// connections to each follower and to the leader read the run. The test logs how many of those
// reads missed the append and how many direct gets each server answered. It asserts only what
// always holds: a read returns a prefix of the run, and a read eventually returns all of it; and
// that LoadAtLeast, given the append's sequence, never misses it.
func TestFollowerReadsCanLag(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	// Until the followers join the responders, the leader answers every direct get.
	c.WaitForDirectGets(t, streams.History)
	ctx := t.Context()
	leader := c.StreamLeader(t, streams.History)
	followers := []int{(leader + 1) % c.Len(), (leader + 2) % c.Len()}
	writer, err := jsstore.New(ctx, c.JetStream(t, leader), nil)
	require.NoError(t, err)
	atLeader, err := jsstore.New(ctx, c.JetStream(t, leader), nil)
	require.NoError(t, err)
	var atFollower [2]*jsstore.Store
	for i, f := range followers {
		atFollower[i], err = jsstore.New(ctx, c.JetStream(t, f), nil)
		require.NoError(t, err)
	}
	var before [3]int64
	for i := range c.Len() {
		_, before[i] = c.DirectGets(i, streams.History)
	}

	// read loads run through s and reports whether it returned all last events.
	read := func(s *jsstore.Store, run string, last uint64) bool {
		got, err := s.Load(ctx, run, 0)
		require.NoError(t, err)
		require.LessOrEqual(t, uint64(len(got)), last, "run %s", run)
		for i, e := range got {
			require.Equal(t, uint64(i+1), e.Seq, "run %s", run)
		}
		return uint64(len(got)) == last
	}

	const runs, commits = 100, 3
	var missedFollower [2]int // reads through followers[i] right after an append that missed it
	var missedFirst, missedLeader int
	start := time.Now()
	for k := range commits {
		for r := range runs {
			run := fmt.Sprintf("lag-%d", r)
			e := started()
			if k > 0 {
				e = signal(fmt.Sprintf("c%d", k))
			}
			last, err := writer.Append(ctx, run, uint64(k), e)
			require.NoError(t, err)
			// Read through both followers, each first in turn, then through the leader.
			first := r % 2
			for j, i := range []int{first, 1 - first} {
				if !read(atFollower[i], run, last) {
					missedFollower[i]++
					if j == 0 {
						missedFirst++
					}
				}
			}
			if !read(atLeader, run, last) {
				missedLeader++
			}
			// What a reader was told exists, it reads, from the leader where a replica lags.
			for _, s := range []*jsstore.Store{atFollower[0], atFollower[1], atLeader} {
				got, err := s.LoadAtLeast(ctx, run, 0, last)
				require.NoError(t, err)
				require.Len(t, got, int(last), "LoadAtLeast(%d) of run %s", last, run)
			}
		}
	}
	appends := runs * commits
	var answered [3]int64
	for i := range c.Len() {
		_, n := c.DirectGets(i, streams.History)
		answered[i] = n - before[i]
	}
	t.Logf("%d appends in %s; reads right after an append that missed it: through follower %s %d/%d, through follower %s %d/%d "+
		"(the first read after the append %d/%d), through leader %s %d/%d; direct gets answered by %s (leader) %d, %s %d, %s %d",
		appends, time.Since(start).Round(time.Millisecond),
		c.Name(followers[0]), missedFollower[0], appends, c.Name(followers[1]), missedFollower[1], appends,
		missedFirst, appends, c.Name(leader), missedLeader, appends,
		c.Name(leader), answered[leader], c.Name(followers[0]), answered[followers[0]], c.Name(followers[1]), answered[followers[1]])

	start = time.Now()
	for _, s := range []*jsstore.Store{atFollower[0], atFollower[1], atLeader} {
		for r := range runs {
			run := fmt.Sprintf("lag-%d", r)
			require.Eventually(t, func() bool { return read(s, run, commits) }, 20*time.Second, 5*time.Millisecond, "run %s", run)
		}
	}
	t.Logf("every store read every run in full %s after the last append", time.Since(start).Round(time.Millisecond))
}

// A read of what a reader was told exists (LoadAtLeast) returns it across leader changes. A
// replica that lags sends the read to the stream's leader; while the lead moves there is no
// leader to answer for a moment, and nats-server lets a newly elected leader answer before its
// store has applied the previous term's commits: the read used to come back short (a history
// read right after a run's result stopped at seq 4 of 6, TestReadsAfterResultOnCluster) or
// fail. Each run gets a commit every store has read, then one more, and the lead is moved at
// once while every store reads the run up to it.
func TestLoadAtLeastAcrossLeaderChanges(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	c.WaitForDirectGets(t, streams.History)
	ctx := t.Context()
	writer, err := jsstore.New(ctx, c.JetStream(t, 0), nil)
	require.NoError(t, err)
	var readers [3]*jsstore.Store
	for i := range readers {
		readers[i], err = jsstore.New(ctx, c.JetStream(t, i), nil)
		require.NoError(t, err)
	}
	admin := c.Connect(t, 0)
	// appendOnce appends e at expected+1, again once the stream has a leader if the lead was
	// still moving (an attempt whose outcome is unknown fails, or conflicts with its own commit).
	appendOnce := func(run string, expected uint64, e event.Event) uint64 {
		var err error
		for range 10 {
			var last uint64
			if last, err = writer.Append(ctx, run, expected, e); err == nil {
				return last
			}
			if errors.Is(err, store.ErrConflict) {
				return expected + 1
			}
			c.StreamLeader(t, streams.History)
		}
		require.NoError(t, err, "appending to run %s", run)
		return 0
	}
	for k := range 15 {
		run := fmt.Sprintf("moving-%d", k)
		appendOnce(run, 0, started())
		for _, r := range readers {
			require.Eventually(t, func() bool { got, err := r.Load(ctx, run, 0); return err == nil && len(got) == 1 },
				20*time.Second, 5*time.Millisecond, "run %s", run)
		}
		last := appendOnce(run, 1, signal("moved"))
		moved := make(chan error, 1)
		go func() {
			_, err := admin.Request("$JS.API.STREAM.LEADER.STEPDOWN."+streams.History, nil, 10*time.Second)
			moved <- err
		}()
		for i, r := range readers {
			got, err := r.LoadAtLeast(ctx, run, 0, last)
			require.NoError(t, err, "run %s through server %d", run, i)
			require.Len(t, got, int(last), "run %s through server %d", run, i)
		}
		require.NoError(t, <-moved)
		c.StreamLeader(t, streams.History) // a leader again before the next run
	}
}

// TestBackToBackAppendsOnACluster: one writer per run appends commit after commit, each right
// after the last was acknowledged, on a cluster. A clustered stream may still hold the previous
// commit as in flight on the run's subject and refuse the next one's expected sequence although
// the leader holds nothing after it; the store must not report that as a conflict ("expected
// last seq 1, the run is at seq 1", seen once in TestClusterConformance under load).
func TestBackToBackAppendsOnACluster(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	c.WaitForDirectGets(t, streams.History)
	const writers, commits = 8, 40
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			s, err := jsstore.New(t.Context(), c.JetStream(t, w%c.Len()), nil)
			if err != nil {
				errs <- err
				return
			}
			run := fmt.Sprintf("b2b-%d", w)
			for i := range commits {
				e := event.Event{Time: time.Now(), Payload: &event.SignalReceived{Name: "poke", Payload: []byte(`1`), DeliveryID: fmt.Sprintf("d%d", i)}}
				if i == 0 {
					e.Payload = &event.RunStarted{Spec: event.Spec{Definition: "b2b"}, Input: []byte(`{}`), Seed: "seed"}
				}
				if _, err := s.Append(t.Context(), run, uint64(i), e); err != nil {
					errs <- fmt.Errorf("commit %d of run %s: %w", i+1, run, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		require.NoError(t, <-errs)
	}
}
