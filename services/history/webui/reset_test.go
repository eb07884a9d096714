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

// The run pages of a reset's two runs link to each other, and the history lines say what
// run.reset and reset_from record; the runs index entries name the other run.
func TestUIResetLinks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := b.history.HTTPAddr()
	runID, err := b.client.Start(b.ctx, "steps", 2, &flow.StartOptions{RunID: "ui-reset"})
	require.NoError(t, err)
	var out int
	require.NoError(t, b.client.Result(b.ctx, runID, &out))
	r, err := b.client.Reset(b.ctx, runID, &flow.ResetOptions{LastDecision: true, Reason: "ui"})
	require.NoError(t, err)
	require.NoError(t, b.client.Result(b.ctx, r.NewRunID, &out))

	old := historytest.Get(t, base, "/ui/runs/ui-reset")
	require.Equal(t, http.StatusOK, old.Status)
	require.Contains(t, old.Body, "<dt>reset as</dt>")
	require.Contains(t, old.Body, `href="/ui/runs/`+r.NewRunID+`"`)
	require.Contains(t, old.Body, "reset as run "+r.NewRunID)
	nw := historytest.Get(t, base, "/ui/runs/"+r.NewRunID)
	require.Equal(t, http.StatusOK, nw.Status)
	require.Contains(t, nw.Body, "<dt>reset from</dt>")
	require.Contains(t, nw.Body, `href="/ui/runs/ui-reset"`)
	require.True(t, strings.Contains(nw.Body, "reset from ui-reset at seq"), "the run.started line names the old run")

	require.Eventually(t, func() bool {
		page, err := b.client.Runs(b.ctx, &flow.RunsFilter{Definition: "steps"})
		if err != nil {
			return false
		}
		linked := 0
		for _, s := range page.Runs {
			if s.RunID == runID && s.ResetTo == r.NewRunID || s.RunID == r.NewRunID && s.ResetFrom == runID {
				linked++
			}
		}
		return linked == 2
	}, 10*time.Second, 10*time.Millisecond, "the index entries link the runs")
}
