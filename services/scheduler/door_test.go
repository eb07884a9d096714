package scheduler_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
)

// TestDoorsFollowTheLeader: the ingress forwards the changes of schedules and batch jobs to
// whichever replica leads the schedule runner and the batch executor. A first scheduler leads
// and answers a create, a trigger and a batch job while a standby answers nothing; once it
// stops, the standby takes both leases over and answers a trigger (whose run it starts), a
// create and a batch job.
func TestDoorsFollowTheLeader(t *testing.T) {
	e := newScheduleEnv(t)
	ctx := e.ctx
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, e.srv), Logger: natstest.Logger()})
	client, err := flow.NewClient(ctx, natstest.Connect(t, e.srv), nil)
	require.NoError(t, err)
	answers := func(s *scheduler.Scheduler) func() bool {
		return func() bool { return s.AnswersSchedules() && s.AnswersBatches() }
	}
	s1 := e.scheduler("s1", nil, 100*time.Millisecond)
	require.Eventually(t, answers(s1), 20*time.Second, 5*time.Millisecond, "s1 leads")
	s2 := e.scheduler("s2", nil, 100*time.Millisecond)

	// The worker registers "tick" a moment after it started.
	require.Eventually(t, func() bool {
		_, err = client.Schedules().Create(ctx, "daily", flow.ScheduleConfig{Every: 24 * time.Hour, Definition: "tick"})
		return !errors.Is(err, flow.ErrNoWorker)
	}, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, err)
	triggered := func(id string) {
		t.Helper()
		tr, err := client.Schedules().Trigger(ctx, "daily", &flow.TriggerOptions{RequestID: id})
		require.NoError(t, err)
		require.True(t, tr.Accepted)
		require.Eventually(t, func() bool {
			snap, err := client.Snapshot(ctx, tr.TriggerRunID)
			return err == nil && snap.Schedule != nil && snap.Schedule.Action == event.ScheduleTrigger
		}, 30*time.Second, 20*time.Millisecond, "the leader starts the triggered run")
	}
	batched := func(id string) {
		t.Helper()
		j, err := client.Batches().Start(ctx, flow.BatchSpec{Op: flow.BatchCancel, Where: `definition = "tick"`}, &flow.BatchOptions{ID: id})
		require.NoError(t, err)
		require.Equal(t, flow.BatchPending, j.State)
		j, err = client.Batches().Await(ctx, id)
		require.NoError(t, err)
		require.Equal(t, flow.BatchCompleted, j.State)
	}
	triggered("before")
	batched("before")
	require.False(t, s2.AnswersSchedules() || s2.AnswersBatches(), "a standby does not answer")

	require.NoError(t, s1.Stop())
	require.Eventually(t, answers(s2), 60*time.Second, 5*time.Millisecond, "s2 takes the leases over")
	triggered("after")
	_, err = client.Schedules().Create(ctx, "weekly", flow.ScheduleConfig{Every: 7 * 24 * time.Hour, Definition: "tick"})
	require.NoError(t, err)
	batched("after")
	all, err := client.Schedules().List(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
}
