package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
)

// A timer fires on its commit, before the history service writes its entry (here: never, until
// the test does); an entry written afterwards does not fire the timer again.
func TestTimerFiresOnItsCommitBeforeItsEntry(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	f := newTimerFixture(t, srv)
	s := startScheduler(t, srv, "only")
	require.Eventually(t, s.timers.following.Load, 10*time.Second, time.Millisecond)
	tm := f.sleeping(t, "r", "w", time.Now().Add(100*time.Millisecond))

	require.Eventually(t, func() bool { return f.fired(t, "r", "w") }, 10*time.Second, 10*time.Millisecond,
		"the timer fires with no entry")
	require.Positive(t, s.timers.hints.Load(), "learnt of from its commit")
	f.register(t, tm)
	require.Eventually(t, func() bool { return s.timers.pendingTimers.Load() == 0 && s.timers.seenEntries.Load() > 0 }, 10*time.Second, 10*time.Millisecond,
		"the entry written after the firing is forgotten")
	require.Equal(t, 1, countFired(f.history(t, "r")), "fired once")
	require.EqualValues(t, 1, s.Fired())
}

// A commit the stream refused (another writer won its sequence) still reaches subscribers: the
// timer it would have scheduled never fires, and the one that stands does.
func TestTimerOfARefusedCommitNeverFires(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	f := newTimerFixture(t, srv)
	s := startScheduler(t, srv, "only")
	require.Eventually(t, s.timers.following.Load, 10*time.Second, time.Millisecond)
	ctx := t.Context()
	now := time.Now().UTC()
	_, err := f.st.Append(ctx, "r", 0, event.Event{Time: now, Payload: &event.RunStarted{
		Spec: event.Spec{Definition: "sleeper"}, Input: []byte("null"), Seed: "seed"}})
	require.NoError(t, err)
	// Two writers at sequence 1, as two workers deciding the same run: the second's publish is
	// refused by the stream, and reaches the scheduler's subscription all the same.
	loser, err := jsstore.New(ctx, natstest.JetStream(t, srv), nil)
	require.NoError(t, err)
	_, err = loser.Load(ctx, "r", 0)
	require.NoError(t, err)
	_, err = f.st.Append(ctx, "r", 1, event.Event{Time: now, Payload: &event.WaitScheduled{WaitID: "stands", Deadline: now.Add(300 * time.Millisecond)}})
	require.NoError(t, err)
	_, err = loser.Append(ctx, "r", 1, event.Event{Time: now, Payload: &event.WaitScheduled{WaitID: "refused", Deadline: now}})
	require.ErrorIs(t, err, store.ErrConflict)

	require.Eventually(t, func() bool { return f.fired(t, "r", "stands") }, 10*time.Second, 10*time.Millisecond,
		"the timer of the commit that stands fires")
	require.Eventually(t, func() bool { return s.timers.unconfirmed.Load() > 0 }, 10*time.Second, 10*time.Millisecond,
		"the refused commit's timer is dropped")
	require.False(t, f.fired(t, "r", "refused"))
	require.Equal(t, 1, countFired(f.history(t, "r")))
}

// A scheduler that dies after firing a timer on its commit, before the history service wrote the
// timer's entry, leaves the entry to the next leader: it finds the timer moot.
func TestEntryOfATimerFiredOnItsCommitByAnEarlierLeader(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	f := newTimerFixture(t, srv)
	first := startScheduler(t, srv, "first")
	require.Eventually(t, first.timers.following.Load, 10*time.Second, time.Millisecond)
	tm := f.sleeping(t, "r", "w", time.Now().Add(100*time.Millisecond))
	require.Eventually(t, func() bool { return f.fired(t, "r", "w") }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, first.Stop())

	f.register(t, tm)
	second := startScheduler(t, srv, "second")
	require.Eventually(t, func() bool { return second.Fired() > 0 && second.timers.pendingTimers.Load() == 0 }, 10*time.Second, 10*time.Millisecond,
		"the next leader finds the timer moot")
	require.Equal(t, 1, countFired(f.history(t, "r")), "fired once")
}

// With IgnoreCommits the scheduler knows of timers from their entries only.
func TestIgnoreCommits(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	f := newTimerFixture(t, srv)
	s := startSchedulerWith(t, srv, Config{IgnoreCommits: true})
	require.Eventually(t, s.Leader, 10*time.Second, time.Millisecond)
	f.waitingRun(t, "r", "w", time.Now())
	require.Eventually(t, func() bool { return f.entryGone(t, "r", "w") }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, countFired(f.history(t, "r")))
	require.Zero(t, s.timers.hints.Load())
}

// A fault at each point of a firing on a timer's commit loses nothing: a firing that failed is
// left to the timer's entry, and an entry whose timer fired already is deleted once, later if
// the deletion failed; the timer fires exactly once.
func TestFiringOnACommitFaults(t *testing.T) {
	t.Parallel()
	for _, p := range []fault.Point{fault.StoreAppend, fault.AfterAppendBeforeTask} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			srv := natstest.RunJetStream(t)
			f := newTimerFixture(t, srv)
			faults := &fault.Injector{}
			faults.Arm(p, fault.Fail, 0, 1)
			s := startSchedulerWith(t, srv, Config{Faults: faults})
			require.Eventually(t, s.timers.following.Load, 10*time.Second, time.Millisecond)
			tm := f.sleeping(t, "r", "w", time.Now().Add(50*time.Millisecond))
			require.Eventually(t, func() bool { return faults.Hits(p) > 0 }, 10*time.Second, time.Millisecond,
				"the firing on the commit reaches %s", p)
			f.registerLate(t, tm)
			require.Eventually(t, func() bool { return f.entryGone(t, "r", "w") }, 10*time.Second, 10*time.Millisecond,
				"the entry is deleted once the firing is committed")
			require.Positive(t, faults.Hits(p))
			require.Equal(t, 1, countFired(f.history(t, "r")), "fired once")
		})
	}
}
