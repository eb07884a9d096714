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

// TestUIQueuedRun: a run under flow control that waits for admission shows status queued and
// why, in the run page and the runs list; once admitted, its limits and admission.
func TestUIQueuedRun(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h := startHistory(t, srv)
	base := h.HTTPAddr()
	st, err := jsstore.New(t.Context(), natstest.JetStream(t, srv), &jsstore.Options{Source: "flow/test"})
	require.NoError(t, err)
	now := time.Now().UTC()
	control := &event.FlowControl{Group: "reports", Key: "c-42", KeyPath: "$.customer", KeyConcurrency: 2, OnLimit: event.OnLimitQueue}
	_, err = st.Append(t.Context(), "ui-queued", 0, event.Event{Time: now, Payload: &event.RunStarted{Spec: event.Spec{Definition: "report"},
		Input: json.RawMessage(`{"customer":"c-42"}`), Seed: "s", Priority: 4, Control: control}})
	require.NoError(t, err)

	p := historytest.Get(t, base, "/ui/runs/ui-queued")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `<span class="badge st-queued">queued</span>`)
	require.Contains(t, p.Text(t, "queued"), `Queued: waiting for admission under flow control (group reports, key &#34;c-42&#34;, at most 2 running per key, queue when full)`)
	require.Contains(t, p.Body, "priority 4")
	require.Eventually(t, func() bool {
		l := historytest.Get(t, base, "/ui/?status=queued")
		return l.Status == http.StatusOK && strings.Contains(l.Body, "ui-queued")
	}, 10*time.Second, 10*time.Millisecond, "the runs list shows the queued run")

	_, err = st.Append(t.Context(), "ui-queued", 1, event.Event{Time: now.Add(time.Second), Payload: &event.RunAdmitted{Group: "reports", Key: "c-42",
		Queued: event.Duration(time.Second)}})
	require.NoError(t, err)
	p = historytest.Get(t, base, "/ui/runs/ui-queued")
	require.Contains(t, p.Text(t, "controlled"), "Under flow control: group reports")
	require.Contains(t, p.Body, "admitted at seq 2")
	require.Contains(t, p.Body, "admitted by flow control, group reports")
}
