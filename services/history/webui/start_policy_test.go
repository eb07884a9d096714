package webui_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/pkg/flow"
)

// The run page shows a delayed run's delay, and a run that replaced another links to it; the
// timeline says which start policy applied.
func TestUIShowsStartPolicies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := b.history.HTTPAddr()
	_, err := b.client.Start(b.ctx, "await", nil, &flow.StartOptions{RunID: "ui-later", Delay: time.Hour})
	require.NoError(t, err)
	p := historytest.Get(t, base, "/ui/runs/ui-later")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "<dt>delayed</dt>")
	require.Contains(t, p.Body, "delayed until ")

	id, err := b.client.Start(b.ctx, "await", 2, &flow.StartOptions{RunID: "ui-later", OnConflict: flow.ConflictTerminateExisting})
	require.NoError(t, err)
	require.Equal(t, "ui-later=_1", id)
	p = historytest.Get(t, base, "/ui/runs/"+id)
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "<dt>replaces</dt>")
	require.Contains(t, p.Body, "replaces run ui-later (terminate_existing)")
}
