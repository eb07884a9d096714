package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/schedule"
)

// `flow schedule describe` shows a running run whose chain went on with the chain's current run.
func TestPrintScheduleShowsCurrentRun(t *testing.T) {
	var b strings.Builder
	printSchedule(&b, &api.ScheduleDescription{Schedule: schedule.Schedule{Name: "s", Definition: "d", Spec: schedule.Spec{Cron: "0 9 * * *"},
		State: schedule.State{Running: []string{"s-a", "s-b"}, Current: map[string]string{"s-a": "s-a=_reset-1"}}}})
	require.Contains(t, b.String(), "Running     s-a (now s-a=_reset-1), s-b\n")
}
