package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
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

// recordBeats is a seam for startScheduler: the heartbeat watcher opens its watches of
// FLOW_HEARTBEATS through r.
func recordBeats(r *watchRecorder[engine.HeartbeatEntry]) func(*Scheduler) {
	return func(s *Scheduler) {
		r.open = func(ctx context.Context) (*heartbeats.Watcher, error) { return s.beatStore.Watch(ctx) }
		s.beats.watch = r.watch
	}
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
	now := f.begin(t, runID, "beater", &event.StepScheduled{Steps: []event.StepSpec{{
		ID: "s", Name: "s", Input: json.RawMessage("null"), Retry: event.RetryPolicy{MaxAttempts: 1}.Normalize(),
		Timeouts: &event.StepTimeouts{Heartbeat: event.Duration(hb)}}}})
	b, err := json.Marshal(&engine.HeartbeatEntry{RunID: runID, StepID: "s", Attempt: 1, Started: now,
		Heartbeat: event.Duration(hb), Worker: "test"})
	require.NoError(t, err)
	rev, err := f.beats.Create(t.Context(), heartbeats.Key(runID, "s"), b)
	require.NoError(t, err)
	return rev
}

// timeouts counts the step.failed events of run runID that name a timeout, as a polled
// condition too.
func (f *beatFixture) timeouts(t *testing.T, runID string) int {
	return f.count(t, runID, func(p event.Payload) bool {
		failed, ok := p.(*event.StepFailed)
		return ok && failed.Timeout != ""
	})
}

// revision returns the revision of run runID's entry.
func (f *beatFixture) revision(t *testing.T, runID string) uint64 {
	t.Helper()
	e, err := f.beats.Get(t.Context(), heartbeats.Key(runID, "s"))
	require.NoError(t, err)
	return e.Revision()
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

	s1 := startScheduler(t, srv, "first")
	require.Eventually(t, func() bool { return s1.TimedOut() == 1 && s1.BeatChecks() == 1 }, 20*time.Second, 10*time.Millisecond,
		"the first watcher times the attempt out")
	require.Equal(t, 1, f.timeouts(t, "stuck"))
	require.NoError(t, s1.Stop())
	require.Equal(t, rev, f.revision(t, "stuck"), "the watcher wrote the worker's entry")

	watches := &watchRecorder[engine.HeartbeatEntry]{}
	s2 := startScheduler(t, srv, "second", recordBeats(watches))
	require.Eventually(t, func() bool { return s2.BeatChecks() == 1 }, 20*time.Second, 10*time.Millisecond,
		"the second watcher checks the passed deadline against history")
	require.Zero(t, s2.TimedOut(), "history shows the attempt settled")

	// The watch ends and starts again; an entry written after the entry checked is timed out,
	// and the checked one is not checked again.
	watches.stopLatest(t)
	require.Eventually(t, func() bool { opened, _ := watches.counts(); return opened == 2 }, 20*time.Second, 10*time.Millisecond,
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
