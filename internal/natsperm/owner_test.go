package natsperm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/pkg/flow"
)

// Schedules and batch jobs under the roles: the ingress, which may only read FLOW_SCHEDULES and
// FLOW_BATCHES, forwards every change to the scheduler, their one writer. A schedule is created,
// triggered (its run completes), paused and deleted, and a batch job created and stopped, as a
// client, without a permission violation.
func TestSchedulesAndBatchesAsTheirRoles(t *testing.T) {
	st := runRoles(t)
	c := st.client
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// The worker registers its definitions, and the scheduler takes its leases, a moment after
	// they started.
	notYet := func(err error) bool {
		var e *api.IngressError
		return errors.Is(err, flow.ErrNoWorker) || errors.As(err, &e) && e.Code == api.CodeIngressBusy
	}
	var err error
	require.Eventually(t, func() bool {
		_, err = c.Schedules().Create(ctx, "remind", flow.ScheduleConfig{Every: time.Hour, Definition: "reminder",
			Input: examples.ReminderInput{After: "10ms"}})
		return !notYet(err)
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, err)
	tr, err := c.Schedules().Trigger(ctx, "remind", nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := c.Snapshot(ctx, tr.TriggerRunID)
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the scheduler starts the triggered run")
	var out any
	require.NoError(t, c.Result(ctx, tr.TriggerRunID, &out))
	require.NoError(t, c.Schedules().Pause(ctx, "remind", "maintenance"))
	d, err := c.Schedules().Describe(ctx, "remind", 0)
	require.NoError(t, err)
	require.True(t, d.Schedule.State.Paused)
	require.NoError(t, c.Schedules().Delete(ctx, "remind"))

	var j *flow.BatchJob
	require.Eventually(t, func() bool {
		j, err = c.Batches().Start(ctx, flow.BatchSpec{Op: flow.BatchCancel, Where: `definition = "reminder"`}, &flow.BatchOptions{ID: "roles"})
		return !notYet(err)
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, err)
	_, err = c.Batches().Stop(ctx, j.ID, "enough")
	require.NoError(t, err)
	j, err = c.Batches().Await(ctx, j.ID)
	require.NoError(t, err)
	require.True(t, j.State.Ended())
	require.Empty(t, st.v.Seen(), "a service or a client was refused a subject its role needs")
}

// Dedup and debounce starts under the roles: the ingress, which may not write FLOW_START_KEYS,
// asks the history service to claim and replace the keys, and the history service releases the
// debounce key when the scheduler fires the run. A dedup key's second start gets the first run,
// three debounced starts make one run that ends, and the services read the checkpoints the
// history service writes, without a permission violation.
func TestKeyedStartsAsTheirRoles(t *testing.T) {
	st := runRoles(t)
	c := st.client
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var first string
	var err error
	require.Eventually(t, func() bool {
		first, err = c.Start(ctx, "reminder", examples.ReminderInput{After: "1h"}, &flow.StartOptions{DedupKey: "nightly", DedupWindow: time.Hour})
		return !errors.Is(err, flow.ErrNoWorker)
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, err)
	again, err := c.Start(ctx, "reminder", examples.ReminderInput{After: "2h"}, &flow.StartOptions{DedupKey: "nightly", DedupWindow: time.Hour})
	require.NoError(t, err)
	require.Equal(t, first, again)

	var debounced string
	for i := range 3 {
		id, err := c.Start(ctx, "reminder", examples.ReminderInput{After: "10ms"}, &flow.StartOptions{
			Debounce: &flow.Debounce{Key: "doc-9", Period: 300 * time.Millisecond}})
		require.NoError(t, err)
		if i == 0 {
			debounced = id
		}
		require.Equal(t, debounced, id, "start %d collapses into the pending run", i)
	}
	var out any
	require.NoError(t, c.Result(ctx, debounced, &out))
	// The run started and ended: the next start of the key is a new run.
	id, err := c.Start(ctx, "reminder", examples.ReminderInput{After: "10ms"}, &flow.StartOptions{
		Debounce: &flow.Debounce{Key: "doc-9", Period: 300 * time.Millisecond}})
	require.NoError(t, err)
	require.NotEqual(t, debounced, id)
	require.NoError(t, c.Result(ctx, id, &out))
	require.Empty(t, st.v.Seen(), "a service or a client was refused a subject its role needs")
}
