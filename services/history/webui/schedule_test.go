package webui_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/flow"
)

// The schedules pages list a schedule and describe it with its recent actions (linked to their
// runs) and next actions; the run page and the timeline of a scheduled run name the schedule
// and the slot.
func TestUISchedules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := b.history.HTTPAddr()
	p := uiGet(t, base, "/ui/schedules")
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.body, "No schedules yet")

	var err error
	// The worker registers "steps" a moment after it started.
	require.Eventually(t, func() bool {
		_, err = b.client.Schedules().Create(b.ctx, "ui-tick", flow.ScheduleConfig{Every: time.Second, Definition: "steps", Input: 1,
			Overlap: flow.OverlapAllowAll})
		return !errors.Is(err, flow.ErrNoWorker)
	}, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, err)
	var d *flow.ScheduleDescription
	require.Eventually(t, func() bool {
		d, err = b.client.Schedules().Describe(b.ctx, "ui-tick", nil)
		return err == nil && d.Schedule.State.Started >= 1
	}, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, b.client.Schedules().Pause(b.ctx, "ui-tick", "ui test"))
	run := d.Schedule.State.Recent[0].RunID

	p = uiGet(t, base, "/ui/schedules")
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.body, `<a href="/ui/schedules/ui-tick">ui-tick</a>`)
	require.Contains(t, p.body, "every 1s")
	require.Contains(t, p.body, "paused")

	p = uiGet(t, base, "/ui/schedules/ui-tick")
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.body, "Recent actions")
	require.Contains(t, p.body, `<a href="/ui/runs/`+run+`">`+run+`</a>`)
	require.Contains(t, p.body, "allow_all")
	require.Contains(t, p.body, "Paused: no action until unpaused.")

	require.Eventually(t, func() bool {
		p = uiGet(t, base, "/ui/runs/"+run)
		return p.status == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, p.body, "<dt>schedule</dt>")
	require.Contains(t, p.body, "by schedule ui-tick for slot ")

	p = uiGet(t, base, "/ui/schedules/nope")
	require.Equal(t, http.StatusNotFound, p.status)
	require.NoError(t, b.client.Schedules().Delete(b.ctx, "ui-tick"))
}
