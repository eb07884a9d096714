package webui_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/pkg/event"
)

// TestUIQueuedRun: a run under flow control that waits for admission shows status queued and
// why, in the run page and the runs list; once admitted, its limits and admission.
func TestUIQueuedRun(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	control := &event.FlowControl{Group: "reports", Key: "c-42", KeyPath: "$.customer", KeyConcurrency: 2, OnLimit: event.OnLimitQueue}
	b.append(t, "ui-queued", 0, event.Event{Time: b.now, Payload: &event.RunStarted{Spec: event.Spec{Definition: "report"},
		Input: json.RawMessage(`{"customer":"c-42"}`), Seed: "s", Priority: 4, Control: control}})

	p := historytest.Get(t, b.base, "/ui/runs/ui-queued")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `<span class="badge st-queued">queued</span>`)
	require.Contains(t, p.Text(t, "queued"), `Queued: waiting for admission under flow control (group reports, key &#34;c-42&#34;, at most 2 running per key, queue when full)`)
	require.Contains(t, p.Body, "priority 4")
	require.Eventually(t, func() bool {
		l := historytest.Get(t, b.base, "/ui/?status=queued")
		return l.Status == http.StatusOK && strings.Contains(l.Body, "ui-queued")
	}, 10*time.Second, 10*time.Millisecond, "the runs list shows the queued run")

	b.append(t, "ui-queued", 1, event.Event{Time: b.now.Add(time.Second), Payload: &event.RunAdmitted{Group: "reports", Key: "c-42",
		Queued: event.Duration(time.Second)}})
	p = historytest.Get(t, b.base, "/ui/runs/ui-queued")
	require.Contains(t, p.Text(t, "controlled"), "Under flow control: group reports")
	require.Contains(t, p.Body, "admitted at seq 2")
	require.Contains(t, p.Body, "admitted by flow control, group reports")
}

// TestUIPausedRun: a paused run shows status paused, why, and the pause and unpause buttons;
// the runs list filters it by status and by `status = "paused"`.
func TestUIPausedRun(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	b.append(t, "ui-paused", 0, event.Event{Time: b.now, Payload: &event.RunStarted{Spec: event.Spec{Definition: "report"},
		Input: json.RawMessage(`{}`), Seed: "s"}})
	b.append(t, "ui-paused", 1, event.Event{Time: b.now.Add(time.Second), Payload: &event.RunPaused{Cause: event.PauseOperator,
		Reason: "maintenance", By: "ann"}})

	p := historytest.Get(t, b.base, "/ui/runs/ui-paused")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `<span class="badge st-paused">paused</span>`)
	require.Contains(t, p.Text(t, "paused"), "Paused at seq 2: paused by ann: maintenance.")
	require.Contains(t, p.Body, `action="/ui/runs/ui-paused/pause"`)
	require.Contains(t, p.Body, `action="/ui/runs/ui-paused/unpause"`)
	for _, q := range []string{"/ui/?status=paused", "/ui/?where=" + strings.ReplaceAll(`status+%3D+%22paused%22`, " ", "+")} {
		require.Eventually(t, func() bool {
			l := historytest.Get(t, b.base, q)
			return l.Status == http.StatusOK && strings.Contains(l.Body, "ui-paused")
		}, 10*time.Second, 10*time.Millisecond, "the runs list %s shows the paused run", q)
	}
}

// TestUIDiagnosis: a run blocked by nondeterminism shows status blocked and the diagnosis: what
// differs, where, and which build; not at a sequence before it was blocked.
func TestUIDiagnosis(t *testing.T) {
	t.Parallel()
	b := setupStore(t)
	// A run whose code changed: the worker of build b2 now reserves "sku-2" where history has
	// "sku-1" (history written directly: no worker serves the definition, so nothing else
	// decides it).
	nd := &core.NonDeterminismError{RunID: "ui-blocked", Kind: "step", ID: "reserve", Field: "input",
		Recorded: `{"sku":"sku-1"}`, New: `{"sku":"sku-2"}`, Seq: 2}
	b.append(t, "ui-blocked", 0,
		event.Event{Time: b.now, Payload: &event.RunStarted{Spec: event.Spec{Definition: "changed"}, Input: json.RawMessage(`{}`), Seed: "s"}},
		event.Event{Time: b.now, Payload: &event.StepScheduled{Steps: []event.StepSpec{{ID: "reserve", Name: "reserveStock", Input: json.RawMessage(`{"sku":"sku-1"}`), Retry: event.RetryPolicy{}.Normalize()}}}},
		event.Event{Time: b.now, Payload: &event.StepCompleted{StepID: "reserve", Attempt: 1, Output: json.RawMessage(`"ok"`)}},
		event.Event{Time: b.now, Payload: core.DecisionFailure(nd, "b2")})

	p := historytest.Get(t, b.base, "/ui/runs/ui-blocked")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `<span class="badge st-blocked">blocked</span>`)
	require.Contains(t, p.Body, "Blocked · nondeterminism")
	require.Contains(t, p.Body, "[FLOW-REPLAY-1]")
	require.Equal(t, `step &#34;reserve&#34;`, p.Text(t, "diag-subject"))
	require.Equal(t, "input", p.Text(t, "diag-field"))
	require.Equal(t, `{&#34;sku&#34;:&#34;sku-1&#34;}`, p.Text(t, "diag-recorded"))
	require.Equal(t, `{&#34;sku&#34;:&#34;sku-2&#34;}`, p.Text(t, "diag-produced"))
	require.Equal(t, "2", p.Text(t, "diag-seq"))
	require.Contains(t, p.Body, "decision.failed at seq <a href=\"#\" data-at=\"4\">4</a>, worker build b2")

	before := historytest.Get(t, b.base, "/ui/runs/ui-blocked?at=3")
	require.Equal(t, http.StatusOK, before.Status)
	require.NotContains(t, before.Body, `id="diagnosis"`, "not blocked yet at seq 3")
	require.Contains(t, before.Body, "The run is blocked now")
}
