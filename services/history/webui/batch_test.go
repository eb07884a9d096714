package webui_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/pkg/flow"
)

// TestUIBatches: the batch jobs page lists a job, and its page shows the report, with the
// skipped runs linked by reason.
func TestUIBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := b.history.HTTPAddr()
	runID, err := b.client.Start(b.ctx, "steps", 1, &flow.StartOptions{RunID: "ui-batch-done"})
	require.NoError(t, err)
	require.NoError(t, b.client.Result(b.ctx, runID, new(int)))
	require.Eventually(t, func() bool {
		p, err := b.client.Runs(b.ctx, &flow.RunsFilter{Where: `run_id = "ui-batch-done" and status = "completed"`})
		return err == nil && p.Total == 1
	}, 10*time.Second, 10*time.Millisecond)

	p := historytest.Get(t, base, "/ui/batches")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "No batch jobs yet")

	_, err = b.client.Batches().Start(b.ctx, flow.BatchSpec{Op: flow.BatchCancel, Where: `run_id = "ui-batch-done"`}, &flow.BatchOptions{ID: "ui-job"})
	require.NoError(t, err)
	j, err := b.client.Batches().Await(b.ctx, "ui-job")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"already completed": 1}, j.Skipped)

	p = historytest.Get(t, base, "/ui/batches")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `href="/ui/batches/ui-job"`)
	require.Contains(t, p.Body, `href="/ui/batches">Batch jobs</a>`, "the navigation links the page")
	p = historytest.Get(t, base, "/ui/batches/ui-job")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Contains(t, p.Body, "completed")
	require.True(t, strings.Contains(p.Body, `1 already completed: <a class="mono" href="/ui/runs/ui-batch-done">ui-batch-done</a>`), p.Body)
	p = historytest.Get(t, base, "/ui/batches/nope")
	require.Equal(t, http.StatusNotFound, p.Status)
}
