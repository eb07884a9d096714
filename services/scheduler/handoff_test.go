package scheduler

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
)

// A wait that falls due is handed to its run's workers with a resume task that names it and
// carries the run's last commit. While that task waits in FLOW_TASKS (no worker runs here) the
// scheduler leaves the timer to it, past the grace period; once the task is settled without
// firing the timer (a worker parked the run, say), the scheduler fires it itself, and never
// before the grace period has passed.
func TestHandedOffTimerIsFiredWhenItsTaskIsGone(t *testing.T) {
	t.Parallel()
	const grace = 200 * time.Millisecond
	srv := natstest.RunJetStream(t)
	f := newTimerFixture(t, srv)
	due := time.Now().Add(200 * time.Millisecond).UTC()
	f.waitingRun(t, "r", "w", due)
	s := startSchedulerWith(t, srv, Config{Name: "only", HandOffGrace: grace, Streams: streams.Config{LeaseTTL: time.Second}})

	js := natstest.JetStream(t, srv)
	tasks, err := js.Stream(t.Context(), streams.Tasks)
	require.NoError(t, err)
	subject := streams.TaskSubject("", "", "r")
	var m *jetstream.RawStreamMsg
	require.Eventually(t, func() bool {
		m, err = tasks.GetLastMsgForSubject(t.Context(), subject)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the timer is handed off")
	var task engine.Task
	require.NoError(t, json.Unmarshal(m.Data, &task))
	require.Equal(t, "r", task.RunID)
	require.Equal(t, "due.wait.w", task.Nonce, "the hand-off names its timer")
	require.NotNil(t, task.Head, "the hand-off carries the run's last commit")
	heads, err := event.DecodeEnvelopes(task.Head.Events)
	require.NoError(t, err)
	require.Equal(t, event.TypeWaitScheduled, heads[len(heads)-1].Type())
	require.EqualValues(t, 1, s.HandedOff())

	// Past the grace period, twice, the task still waits, and so does the timer.
	require.Eventually(t, func() bool { return s.timers.waited.Load() >= 2 }, 10*time.Second, 5*time.Millisecond)
	require.Len(t, f.history(t, "r"), 2, "the scheduler leaves a timer to its run's waiting task")
	require.False(t, f.entryGone(t, "r", "w"))

	// A worker takes the task and settles it without firing the timer.
	cons, err := js.CreateOrUpdateConsumer(t.Context(), streams.Tasks, jetstream.ConsumerConfig{Durable: "test", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	for msg := range batch.Messages() {
		require.NoError(t, msg.DoubleAck(t.Context()))
	}
	require.NoError(t, batch.Error())

	require.Eventually(t, func() bool { return f.entryGone(t, "r", "w") }, 30*time.Second, 10*time.Millisecond,
		"the scheduler fires a timer whose task is gone")
	hist := f.history(t, "r")
	require.Len(t, hist, 3)
	require.Equal(t, event.TypeWaitFired, hist[2].Type())
	require.False(t, hist[2].Time.Before(due.Add(grace)), "fired at %v, before the grace period after %v ended", hist[2].Time, due)
}

// A hand-off whose task cannot be published is no hand-off: the scheduler fires the timer at
// once, not after the grace period.
func TestFailedHandOffFiresAtOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	f := newTimerFixture(t, srv)
	due := time.Now().Add(200 * time.Millisecond).UTC()
	f.waitingRun(t, "r", "w", due)
	faults := &fault.Injector{}
	faults.Arm(fault.TaskPublish, fault.Fail, 0, 1)
	s := startSchedulerWith(t, srv, Config{Name: "only", HandOffGrace: time.Hour, Faults: faults, Streams: streams.Config{LeaseTTL: time.Second}})

	require.Eventually(t, func() bool { return f.entryGone(t, "r", "w") }, 10*time.Second, 10*time.Millisecond,
		"the timer fires although its hand-off failed")
	hist := f.history(t, "r")
	require.Equal(t, event.TypeWaitFired, hist[len(hist)-1].Type())
	require.EqualValues(t, 0, s.HandedOff())
	require.Positive(t, faults.Hits(fault.TaskPublish))
}
