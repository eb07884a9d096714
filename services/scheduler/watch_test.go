package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/timerindex"
	"github.com/flowrun/flow/internal/typedkv"
	"github.com/flowrun/flow/pkg/event"
)

// watchRecorder is a watch seam, the timer firer's or the heartbeat watcher's (recordTimers,
// recordBeats), that opens real watches and keeps them, so that a test can end one the way the
// server or the client library would: by closing its Updates channel. After the first failAfter
// watches it fails instead, when failAfter is positive.
type watchRecorder[V any] struct {
	failAfter int
	// open opens a real watch.
	open func(context.Context) (*typedkv.Watcher[V], error)

	mu      sync.Mutex
	opened  []*typedkv.Watcher[V]
	refused int
}

func (r *watchRecorder[V]) watch(ctx context.Context) (*typedkv.Watcher[V], error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failAfter > 0 && len(r.opened) >= r.failAfter {
		r.refused++
		return nil, errors.New("test: watch refused")
	}
	w, err := r.open(ctx)
	if err == nil {
		r.opened = append(r.opened, w)
	}
	return w, err
}

func (r *watchRecorder[V]) counts() (opened, refused int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.opened), r.refused
}

// stopLatest ends the most recent watch; its Updates channel closes.
func (r *watchRecorder[V]) stopLatest(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	w := r.opened[len(r.opened)-1]
	r.mu.Unlock()
	require.NoError(t, w.Stop())
}

// recordTimers is a seam for startScheduler: the timer firer opens its watches of FLOW_TIMERS
// through r.
func recordTimers(r *watchRecorder[core.Timer]) func(*Scheduler) {
	return func(s *Scheduler) {
		r.open = func(ctx context.Context) (*timerindex.Watcher, error) { return s.timerIndex.Watch(ctx) }
		s.timers.watch = r.watch
	}
}

type timerFixture struct {
	st     *jsstore.Store
	timers jetstream.KeyValue
	host   *jshost.Host
}

func newTimerFixture(t *testing.T, srv *natsserver.Server) *timerFixture {
	t.Helper()
	js := natstest.JetStream(t, srv)
	st, err := jsstore.New(t.Context(), js, nil)
	require.NoError(t, err)
	timers, err := js.KeyValue(t.Context(), streams.TimersBucket)
	require.NoError(t, err)
	f := &timerFixture{st: st, timers: timers}
	f.deleteMoot(t, srv)
	return f
}

// deleteMoot plays the history service's part as the timer index's owner that the tests need:
// each commit's moot timers (core.Derive) are deleted from FLOW_TIMERS. (The tests register the
// entries themselves, as the history service would, when they want them.) Like the history
// service, it reads the commits the stream stored: a core subscription would also see an append
// the stream refused (a firing that lost its expected-sequence race) and delete its entry early.
func (f *timerFixture) deleteMoot(t *testing.T, srv *natsserver.Server) {
	t.Helper()
	js := natstest.JetStream(t, srv)
	host, err := jshost.New(t.Context(), js, "flow/test", natstest.Logger())
	require.NoError(t, err)
	f.host = host
	// jsstore.New created the stream.
	cons, err := js.OrderedConsumer(t.Context(), streams.History, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{streams.AllRuns}})
	require.NoError(t, err)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		runID := strings.TrimPrefix(m.Subject(), streams.Layout{}.Subject(""))
		c, ok := jsstore.CommitOf(runID, m.Headers(), m.Data())
		if !ok {
			return
		}
		commit, err := c.Events()
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hist, err := f.st.LoadAtLeast(ctx, runID, 0, c.Last)
		if err != nil {
			return
		}
		s, err := core.Project(runID, hist)
		if err != nil {
			return
		}
		_ = host.DeleteTimers(ctx, core.Derive(s, commit).Moot)
	})
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
}

// registerLate registers timer tm as a history service that is behind would: it writes the
// entry on the commit that scheduled the timer and then, applying the run's later commits in
// order, deletes it if one of them made the timer moot (a firing committed before the entry
// was written). The fixture's follower alone would miss that deletion when it saw the firing
// before the entry existed.
func (f *timerFixture) registerLate(t *testing.T, tm core.Timer) {
	t.Helper()
	f.register(t, tm)
	hist, err := f.st.Load(t.Context(), tm.RunID, 0)
	require.NoError(t, err)
	s, err := core.Project(tm.RunID, hist)
	require.NoError(t, err)
	require.NoError(t, f.host.DeleteTimers(t.Context(), core.Derive(s, hist).Moot))
}

// waitingRun appends a run that waits on wait waitID until due, and registers its timer.
func (f *timerFixture) waitingRun(t *testing.T, runID, waitID string, due time.Time) {
	t.Helper()
	f.register(t, f.sleeping(t, runID, waitID, due))
}

// sleeping appends a run that waits on wait waitID until due and returns its timer, as the
// history service would register it.
func (f *timerFixture) sleeping(t *testing.T, runID, waitID string, due time.Time) core.Timer {
	t.Helper()
	f.begin(t, runID, "sleeper", &event.WaitScheduled{WaitID: waitID, Deadline: due})
	return core.Timer{RunID: runID, Kind: core.TimerWait, ID: waitID, Due: due, Seq: 2}
}

// begin appends run runID of definition def, started now, and its first decision's event
// first; it returns the events' time.
func (f *timerFixture) begin(t *testing.T, runID, def string, first event.Payload) time.Time {
	t.Helper()
	now := time.Now().UTC()
	_, err := f.st.Append(t.Context(), runID, 0, event.Event{Time: now, Payload: &event.RunStarted{
		Spec: event.Spec{Definition: def}, Input: json.RawMessage("null"), Seed: "seed"}})
	require.NoError(t, err)
	_, err = f.st.Append(t.Context(), runID, 1, event.Event{Time: now, Payload: first})
	require.NoError(t, err)
	return now
}

// register writes timer tm's entry, as the history service does.
func (f *timerFixture) register(t *testing.T, tm core.Timer) {
	t.Helper()
	b, err := json.Marshal(tm)
	require.NoError(t, err)
	_, err = f.timers.Put(t.Context(), timerindex.Key(tm), b)
	require.NoError(t, err)
}

// fired reports whether run runID's history holds wait.fired for waitID. It runs as a polled
// condition, outside the test's goroutine, so a failed read counts as not yet.
func (f *timerFixture) fired(t *testing.T, runID, waitID string) bool {
	return f.count(t, runID, func(p event.Payload) bool {
		w, ok := p.(*event.WaitFired)
		return ok && w.WaitID == waitID
	}) > 0
}

// count counts the events of run runID whose payload match accepts. It runs as a polled
// condition too, so a failed read counts as none.
func (f *timerFixture) count(t *testing.T, runID string, match func(event.Payload) bool) int {
	hist, err := f.st.Load(t.Context(), runID, 0)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range hist {
		if match(e.Payload) {
			n++
		}
	}
	return n
}

// startScheduler starts a scheduler named name on srv whose leases expire after a second.
func startScheduler(t *testing.T, srv *natsserver.Server, name string, seams ...func(*Scheduler)) *Scheduler {
	t.Helper()
	return startSchedulerWith(t, srv, Config{Name: name, Streams: streams.Config{LeaseTTL: time.Second}}, seams...)
}

// startSchedulerWith starts a scheduler on srv with cfg, its connection and logger filled in,
// and stops it when the test ends. Each of seams, called before Start, replaces a part of the
// scheduler the test stands in for. No worker runs in these tests: unless cfg says otherwise,
// the scheduler fires every timer itself when due (handoff_test.go tests the hand-off).
func startSchedulerWith(t *testing.T, srv *natsserver.Server, cfg Config, seams ...func(*Scheduler)) *Scheduler {
	t.Helper()
	cfg.Conn, cfg.Logger = natstest.Connect(t, srv), natstest.Logger()
	if cfg.HandOffGrace == 0 {
		cfg.HandOffGrace = -1
	}
	s, err := New(cfg)
	require.NoError(t, err)
	for _, seam := range seams {
		seam(s)
	}
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// TestLeaderServesAgainAfterWatchEnds ends the leader's timer watch and checks that a timer
// registered afterwards still fires: the scheduler must not keep its lease while serving nothing.
func TestLeaderServesAgainAfterWatchEnds(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	f := newTimerFixture(t, srv)
	rec := &watchRecorder[core.Timer]{}
	s := startScheduler(t, srv, "only", recordTimers(rec))

	f.waitingRun(t, "before", "w", time.Now())
	require.Eventually(t, func() bool { return f.fired(t, "before", "w") }, 10*time.Second, 20*time.Millisecond,
		"the leader fires a timer before its watch ends")
	require.True(t, s.Leader())

	rec.stopLatest(t)
	f.waitingRun(t, "after", "w", time.Now().Add(100*time.Millisecond))
	require.Eventually(t, func() bool { return f.fired(t, "after", "w") }, 10*time.Second, 20*time.Millisecond,
		"a timer registered after the watch ended must fire")
	opened, _ := rec.counts()
	require.GreaterOrEqual(t, opened, 2, "the watch is opened again")
	require.Eventually(t, s.Leader, 5*time.Second, 20*time.Millisecond)
}

// TestStandbyTakesOverWhenLeaderCannotWatch ends the leader's watch and makes every later watch
// of that replica fail: the standby must take the lease and fire.
func TestStandbyTakesOverWhenLeaderCannotWatch(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	f := newTimerFixture(t, srv)
	rec := &watchRecorder[core.Timer]{failAfter: 1}
	a := startScheduler(t, srv, "a", recordTimers(rec))
	require.Eventually(t, func() bool { opened, _ := rec.counts(); return a.Leader() && opened == 1 },
		10*time.Second, 20*time.Millisecond)
	b := startScheduler(t, srv, "b")

	rec.stopLatest(t)
	// The leader may fire what it learns of until its loop sees the watch end; the timer is
	// written once it has.
	require.Eventually(t, func() bool { return !a.Leader() }, 10*time.Second, 10*time.Millisecond)
	f.waitingRun(t, "r", "w", time.Now())
	require.Eventually(t, func() bool { return f.fired(t, "r", "w") }, 15*time.Second, 20*time.Millisecond,
		"the standby fires once the leader cannot watch")
	require.True(t, b.Leader())
	require.False(t, a.Leader())
	// Fired counts once Fire returns, which is after the firing is visible in history.
	require.Eventually(t, func() bool { return b.Fired() == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, a.Fired())
}
