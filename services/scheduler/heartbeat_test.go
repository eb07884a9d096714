package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/heartbeats"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
)

// beatWatches is a watchBeats seam that opens real watches of FLOW_HEARTBEATS and keeps them, so
// that a test can end one as the server would: its Updates channel closes.
type beatWatches struct {
	beats *heartbeats.Store

	mu     sync.Mutex
	opened []*heartbeats.Watcher
}

func (b *beatWatches) watch(ctx context.Context) (*heartbeats.Watcher, error) {
	w, err := b.beats.Watch(ctx)
	if err == nil {
		b.mu.Lock()
		b.opened = append(b.opened, w)
		b.mu.Unlock()
	}
	return w, err
}

func (b *beatWatches) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.opened)
}

func (b *beatWatches) stopLatest(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	w := b.opened[len(b.opened)-1]
	b.mu.Unlock()
	require.NoError(t, w.Stop())
}

// beatFixture appends runs with a step attempt in flight and writes their FLOW_HEARTBEATS
// entries, as a worker starting the attempt does.
type beatFixture struct {
	*timerFixture
	beats jetstream.KeyValue
}

func newBeatFixture(t *testing.T, srv *natsserver.Server) *beatFixture {
	t.Helper()
	beats, err := natstest.JetStream(t, srv).KeyValue(t.Context(), streams.HeartbeatsBucket)
	require.NoError(t, err)
	return &beatFixture{timerFixture: newTimerFixture(t, srv), beats: beats}
}

// started appends run runID whose step "s" (heartbeat timeout hb, one attempt) is in flight, and
// writes the entry of its attempt's start; it returns the entry's revision.
func (f *beatFixture) started(t *testing.T, runID string, hb time.Duration) uint64 {
	t.Helper()
	ctx := t.Context()
	now := time.Now().UTC()
	_, err := f.st.Append(ctx, runID, 0, event.Event{Time: now, Payload: &event.RunStarted{
		Spec: event.Spec{Definition: "beater"}, Input: json.RawMessage("null"), Seed: "seed"}})
	require.NoError(t, err)
	_, err = f.st.Append(ctx, runID, 1, event.Event{Time: now, Payload: &event.StepScheduled{Steps: []event.StepSpec{{
		ID: "s", Name: "s", Input: json.RawMessage("null"), Retry: event.RetryPolicy{MaxAttempts: 1}.Normalize(),
		Timeouts: &event.StepTimeouts{Heartbeat: event.Duration(hb)}}}}})
	require.NoError(t, err)
	b, err := json.Marshal(&engine.HeartbeatEntry{RunID: runID, StepID: "s", Attempt: 1, Started: now,
		Heartbeat: event.Duration(hb), Worker: "test"})
	require.NoError(t, err)
	rev, err := f.beats.Create(ctx, heartbeats.Key(runID, "s"), b)
	require.NoError(t, err)
	return rev
}

// timeouts counts the step.failed events of run runID that name a timeout. It runs as a polled
// condition too, so a failed read counts as none.
func (f *beatFixture) timeouts(t *testing.T, runID string) int {
	hist, err := f.st.Load(t.Context(), runID, 0)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range hist {
		if p, ok := e.Payload.(*event.StepFailed); ok && p.Timeout != "" {
			n++
		}
	}
	return n
}

// revision returns the revision of run runID's entry.
func (f *beatFixture) revision(t *testing.T, runID string) uint64 {
	t.Helper()
	e, err := f.beats.Get(t.Context(), heartbeats.Key(runID, "s"))
	require.NoError(t, err)
	return e.Revision()
}

func startBeatScheduler(t *testing.T, srv *natsserver.Server, name string, watches *beatWatches) *Scheduler {
	t.Helper()
	s, err := New(Config{Conn: natstest.Connect(t, srv), Name: name, Logger: natstest.Logger(),
		Streams: streams.Config{LeaseTTL: time.Second}})
	require.NoError(t, err)
	if watches != nil {
		s.beats.watch = watches.watch
	}
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// A watcher that starts after another timed an attempt out checks the entry's passed deadline
// against history once, appends nothing, and forgets the entry: a watch that starts again in
// the same process skips it (the record of checked revisions). No watcher writes the entry:
// the workers are FLOW_HEARTBEATS's one writer.
func TestRestartedHeartbeatWatcherChecksOnceAndGoesQuiet(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	f := newBeatFixture(t, srv)
	rev := f.started(t, "stuck", 200*time.Millisecond)

	s1 := startBeatScheduler(t, srv, "first", nil)
	require.Eventually(t, func() bool { return s1.TimedOut() == 1 && s1.BeatChecks() == 1 }, 20*time.Second, 10*time.Millisecond,
		"the first watcher times the attempt out")
	require.Equal(t, 1, f.timeouts(t, "stuck"))
	require.NoError(t, s1.Stop())
	require.Equal(t, rev, f.revision(t, "stuck"), "the watcher wrote the worker's entry")

	store, err := heartbeats.Open(t.Context(), natstest.JetStream(t, srv))
	require.NoError(t, err)
	watches := &beatWatches{beats: store}
	s2 := startBeatScheduler(t, srv, "second", watches)
	require.Eventually(t, func() bool { return s2.BeatChecks() == 1 }, 20*time.Second, 10*time.Millisecond,
		"the second watcher checks the passed deadline against history")
	require.Zero(t, s2.TimedOut(), "history shows the attempt settled")

	// The watch ends and starts again; an entry written after the entry checked is timed out,
	// and the checked one is not checked again.
	watches.stopLatest(t)
	require.Eventually(t, func() bool { return watches.count() == 2 }, 20*time.Second, 10*time.Millisecond,
		"the watch is opened again")
	laterRev := f.started(t, "later", 300*time.Millisecond)
	require.Eventually(t, func() bool { return s2.TimedOut() == 1 && s2.BeatChecks() >= 2 }, 20*time.Second, 10*time.Millisecond,
		"the restarted watch times the later attempt out")
	require.EqualValues(t, 2, s2.BeatChecks(), "the restarted watch checked the settled entry again")
	require.Equal(t, 1, f.timeouts(t, "stuck"))
	require.Equal(t, 1, f.timeouts(t, "later"))
	require.Equal(t, rev, f.revision(t, "stuck"), "the watcher wrote the worker's entry")
	require.Equal(t, laterRev, f.revision(t, "later"), "the watcher wrote the worker's entry")
}

// The record of checked entries knows a key at the revision checked only, forgets a key once
// written or deleted since, and holds at most checkedCap entries, the oldest evicted first.
func TestCheckedBeatsRecord(t *testing.T) {
	var c checkedBeats
	require.False(t, c.seen("r.s", 1))
	c.add("r.s", 1)
	require.True(t, c.seen("r.s", 1))
	require.False(t, c.seen("r.s", 2), "a later write is checked in its own right")
	require.False(t, c.seen("r.s", 1), "the record of the earlier revision is gone")
	c.add("r.s", 3)
	c.forget("r.s")
	require.False(t, c.seen("r.s", 3))

	for i := range checkedCap + 10 {
		c.add(fmt.Sprintf("r%d.s", i), uint64(100+i))
	}
	require.Len(t, c.rev, checkedCap)
	require.LessOrEqual(t, len(c.order), checkedCap)
	require.False(t, c.seen("r0.s", 100), "the oldest were evicted")
	require.True(t, c.seen(fmt.Sprintf("r%d.s", checkedCap+9), uint64(100+checkedCap+9)))
}
