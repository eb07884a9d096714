package webui_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
)

// TestUIPausedRun: a paused run shows status paused, why, and the pause and unpause buttons;
// the runs list filters it by status and by `status = "paused"`.
func TestUIPausedRun(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h := startHistory(t, srv)
	base := h.HTTPAddr()
	st, err := jsstore.New(t.Context(), natstest.JetStream(t, srv), &jsstore.Options{Source: "flow/test"})
	require.NoError(t, err)
	now := time.Now().UTC()
	_, err = st.Append(t.Context(), "ui-paused", 0, event.Event{Time: now, Payload: &event.RunStarted{Spec: event.Spec{Definition: "report"},
		Input: json.RawMessage(`{}`), Seed: "s"}})
	require.NoError(t, err)
	_, err = st.Append(t.Context(), "ui-paused", 1, event.Event{Time: now.Add(time.Second), Payload: &event.RunPaused{Cause: event.PauseOperator,
		Reason: "maintenance", By: "ann"}})
	require.NoError(t, err)

	p := historytest.Get(t, base, "/ui/runs/ui-paused")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `<span class="badge st-paused">paused</span>`)
	require.Contains(t, p.Text(t, "paused"), "Paused at seq 2: paused by ann: maintenance.")
	require.Contains(t, p.Body, `action="/ui/runs/ui-paused/pause"`)
	require.Contains(t, p.Body, `action="/ui/runs/ui-paused/unpause"`)
	for _, q := range []string{"/ui/?status=paused", "/ui/?where=" + strings.ReplaceAll(`status+%3D+%22paused%22`, " ", "+")} {
		require.Eventually(t, func() bool {
			l := historytest.Get(t, base, q)
			return l.Status == http.StatusOK && strings.Contains(l.Body, "ui-paused")
		}, 10*time.Second, 10*time.Millisecond, "the runs list %s shows the paused run", q)
	}
}
