package webui_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/pkg/flow"
)

// The schedules pages list a schedule and describe it with its recent actions (linked to their
// runs) and next actions; the run page and the timeline of a scheduled run name the schedule
// and the slot.
func TestUISchedules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := b.history.HTTPAddr()
	p := historytest.Get(t, base, "/ui/schedules")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "No schedules yet")

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
		d, err = b.client.Schedules().Describe(b.ctx, "ui-tick", 0)
		return err == nil && d.Schedule.State.Started >= 1
	}, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, b.client.Schedules().Pause(b.ctx, "ui-tick", "ui test"))
	run := d.Schedule.State.Recent[0].RunID

	p = historytest.Get(t, base, "/ui/schedules")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `<a href="/ui/schedules/ui-tick">ui-tick</a>`)
	require.Contains(t, p.Body, "every 1s")
	require.Contains(t, p.Body, "paused")

	p = historytest.Get(t, base, "/ui/schedules/ui-tick")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "Recent actions")
	require.Contains(t, p.Body, `<a href="/ui/runs/`+run+`">`+run+`</a>`)
	require.Contains(t, p.Body, "allow_all")
	require.Contains(t, p.Body, "Paused: no action until unpaused.")

	require.Eventually(t, func() bool {
		p = historytest.Get(t, base, "/ui/runs/"+run)
		return p.Status == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, p.Body, "<dt>schedule</dt>")
	require.Contains(t, p.Body, "by schedule ui-tick for slot ")

	p = historytest.Get(t, base, "/ui/schedules/nope")
	require.Equal(t, http.StatusNotFound, p.Status)
	require.NoError(t, b.client.Schedules().Delete(b.ctx, "ui-tick"))
}
