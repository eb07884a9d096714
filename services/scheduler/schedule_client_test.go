package scheduler_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/ingress"
)

// TestScheduleThroughClient drives schedules through the Go client and the ingress (and one
// HTTP route), which forwards the changes to the scheduler, against the real engine: bad input is refused with errors that name what is
// wrong; a schedule fires, its runs record the schedule and the slot; a trigger and a backfill
// act once however often they are asked for; pause, list, describe and delete work.
func TestScheduleThroughClient(t *testing.T) {
	e := newScheduleEnv(t)
	in := ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, e.srv), Logger: natstest.Logger(), HTTPAddr: "127.0.0.1:0"})
	client, err := flow.NewClient(e.ctx, natstest.Connect(t, e.srv), nil)
	require.NoError(t, err)
	ctx := e.ctx

	for _, bad := range []struct {
		opts flow.ScheduleConfig
		is   error
		says string
	}{
		{flow.ScheduleConfig{Cron: "0 9 * * MUN-FRI", Definition: "tick"}, flow.ErrInvalidInput, "write five fields"},
		{flow.ScheduleConfig{Cron: "0 9 * * MON-FRI", TZ: "Europe/Berlyn", Definition: "tick"}, flow.ErrInvalidInput, `unknown time zone "Europe/Berlyn"; give an IANA name such as Europe/Berlin`},
		{flow.ScheduleConfig{Every: time.Minute, Definition: "tikc"}, flow.ErrNoWorker, `"tikc"`},
		{flow.ScheduleConfig{Every: time.Minute, Definition: "tick", Overlap: "bufer_one"}, flow.ErrInvalidInput, "is not one of skip, buffer_one"},
		{flow.ScheduleConfig{Definition: "tick"}, flow.ErrInvalidInput, "needs a cron expression"},
	} {
		_, err := client.Schedules().Create(ctx, "bad", bad.opts)
		require.ErrorIs(t, err, bad.is, "%+v", bad.opts)
		require.ErrorContains(t, err, bad.says)
	}
	_, err = client.Schedules().Describe(ctx, "nope", 0)
	require.ErrorIs(t, err, flow.ErrScheduleNotFound)

	s1 := e.scheduler("s1", nil, 100*time.Millisecond)
	require.Eventually(t, s1.AnswersSchedules, 20*time.Second, 5*time.Millisecond, "the scheduler leads the schedule runner")
	var d *flow.ScheduleDescription
	// The worker registers "tick" a moment after it started.
	require.Eventually(t, func() bool {
		d, err = client.Schedules().Create(ctx, "tick", flow.ScheduleConfig{Every: time.Second, Definition: "tick", Input: map[string]int{"n": 7},
			Overlap: flow.OverlapAllowAll})
		return !errors.Is(err, flow.ErrNoWorker)
	}, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, d.Next, api.DefaultScheduleNext)
	_, err = client.Schedules().Create(ctx, "tick", flow.ScheduleConfig{Every: time.Second, Definition: "tick"})
	require.ErrorIs(t, err, flow.ErrScheduleExists)

	require.Eventually(t, func() bool {
		d, err = client.Schedules().Describe(ctx, "tick", 3)
		return err == nil && d.Schedule.State.Started >= 2
	}, 20*time.Second, 20*time.Millisecond)
	first := d.Schedule.State.Recent[0]
	require.Equal(t, schedule.Started, first.Outcome)
	var out map[string]int
	require.NoError(t, client.Result(ctx, first.RunID, &out))
	require.Equal(t, 7, out["n"])
	snap, err := client.Snapshot(ctx, first.RunID)
	require.NoError(t, err)
	require.Equal(t, &event.ScheduleRef{Name: "tick", Slot: first.Slot, Action: event.ScheduleScheduled}, snap.Schedule)

	// Paused, it starts no slot; a trigger (asked for twice) and a backfill act all the same.
	require.NoError(t, client.Schedules().Pause(ctx, "tick", "maintenance"))
	tr, err := client.Schedules().Trigger(ctx, "tick", &flow.TriggerOptions{RequestID: "now-1"})
	require.NoError(t, err)
	require.True(t, tr.Accepted)
	again, err := client.Schedules().Trigger(ctx, "tick", &flow.TriggerOptions{RequestID: "now-1"})
	require.NoError(t, err)
	require.False(t, again.Accepted)
	end := time.Now().Add(-time.Hour).Truncate(time.Second)
	bf, err := client.Schedules().Backfill(ctx, "tick", end.Add(-3*time.Second), end, &flow.TriggerOptions{RequestID: "bf-1"})
	require.NoError(t, err)
	require.True(t, bf.Accepted)
	_, err = client.Schedules().Backfill(ctx, "tick", end, end.Add(3*time.Hour), nil)
	require.ErrorIs(t, err, flow.ErrInvalidInput)
	require.ErrorContains(t, err, "in the future")

	var trigger *event.ScheduleRef
	require.Eventually(t, func() bool {
		s, err := client.Snapshot(ctx, tr.TriggerRunID)
		if err != nil {
			return false
		}
		trigger = s.Schedule
		for i := range 3 {
			id := schedule.RunID("tick", event.ScheduleBackfill, end.Add(time.Duration(i-3)*time.Second), "bf-1")
			s, err := client.Snapshot(ctx, id)
			if err != nil || s.Schedule == nil || s.Schedule.Action != event.ScheduleBackfill {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, event.ScheduleTrigger, trigger.Action)

	d, err = client.Schedules().Describe(ctx, "tick", 0)
	require.NoError(t, err)
	require.True(t, d.Schedule.State.Paused)
	require.Equal(t, "maintenance", d.Schedule.State.Note)
	require.Empty(t, d.Next, "a paused schedule has no next actions")
	triggers := 0
	for _, a := range d.Schedule.State.Recent {
		if a.Kind == event.ScheduleTrigger {
			triggers++
		}
	}
	require.Equal(t, 1, triggers)

	// The same through HTTP.
	resp, err := http.Get("http://" + in.HTTPAddr() + "/v1/schedules")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var list api.ScheduleList
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	require.Len(t, list.Schedules, 1)
	require.Equal(t, "tick", list.Schedules[0].Schedule.Name)
	doc, err := http.Get("http://" + in.HTTPAddr() + "/v1/openapi.json")
	require.NoError(t, err)
	defer doc.Body.Close()
	var openapi struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	require.NoError(t, json.NewDecoder(doc.Body).Decode(&openapi))
	for p, m := range map[string]string{"/v1/schedules": "post", "/v1/schedules/{name}": "get", "/v1/schedules/{name}/backfill": "post"} {
		require.Contains(t, openapi.Paths[p], m, p)
	}

	require.NoError(t, client.Schedules().Unpause(ctx, "tick", ""))
	require.NoError(t, client.Schedules().Delete(ctx, "tick"))
	all, err := client.Schedules().List(ctx)
	require.NoError(t, err)
	require.Empty(t, all)
	err = client.Schedules().Pause(ctx, "tick", "")
	require.True(t, errors.Is(err, flow.ErrScheduleNotFound), "%v", err)
}
