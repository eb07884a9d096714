package webui

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/pkg/event"
)

// TestUIScheduleShowsCurrentRun: a running run whose chain went on (it continued as new, or was
// reset) is shown with the chain's current run, both linked.
func TestUIScheduleShowsCurrentRun(t *testing.T) {
	sch := schedule.Schedule{Name: "s", Definition: "d", Spec: schedule.Spec{Every: event.Duration(time.Second)},
		State: schedule.State{Running: []string{"s-a", "s-b"}, Current: map[string]string{"s-a": "s-a=1"}}}
	var b bytes.Buffer
	require.NoError(t, uiTemplates.ExecuteTemplate(&b, "schedule.html",
		uiSchedulePage{ScheduleDescription: api.ScheduleDescription{Schedule: sch}, Now: time.Now()}))
	require.Contains(t, b.String(), `<a href="/ui/runs/s-a">s-a</a> (now <a href="/ui/runs/s-a=1">s-a=1</a>) <a href="/ui/runs/s-b">s-b</a> `)
}
