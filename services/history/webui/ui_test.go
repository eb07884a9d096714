package webui_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

func TestUIPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := b.history.HTTPAddr()
	runID, err := b.client.Start(b.ctx, "steps", 3, &flow.StartOptions{RunID: "ui-steps"})
	require.NoError(t, err)
	var out int
	require.NoError(t, b.client.Result(b.ctx, runID, &out))
	hist, err := b.client.History(b.ctx, runID, 0)
	require.NoError(t, err)
	last := hist[len(hist)-1].Seq

	t.Run("RootRedirects", func(t *testing.T) {
		p := historytest.Get(t, base, "/")
		require.Equal(t, http.StatusFound, p.Status)
		require.Equal(t, "/ui/", p.Header.Get("Location"))
	})

	t.Run("RunsList", func(t *testing.T) {
		require.Eventually(t, func() bool {
			p := historytest.Get(t, base, "/ui/?status=completed")
			return p.Status == http.StatusOK && strings.Contains(p.Body, `href="/ui/runs/ui-steps"`)
		}, 10*time.Second, 10*time.Millisecond, "the list shows the completed run once the index has it")
		p := historytest.Get(t, base, "/ui/")
		require.Equal(t, http.StatusOK, p.Status)
		require.Contains(t, p.Header.Get("Content-Type"), "text/html")
		require.Contains(t, p.Header.Get("Content-Security-Policy"), "default-src 'self'")
		require.Contains(t, p.Body, `<span class="badge st-completed">completed</span>`)
		require.Contains(t, p.Body, `<option value="steps">steps</option>`, "the definition filter offers the served definitions")
		for query, shown := range map[string]bool{
			"?status=suspended": false, "?status=completed&definition=steps": true, "?definition=nap": false,
			"?prefix=ui-st": true, "?prefix=zz": false, "?prefix=ui-&status=completed,suspended": true,
		} {
			p := historytest.Get(t, base, "/ui/"+query)
			require.Equal(t, http.StatusOK, p.Status, query)
			require.Equal(t, shown, strings.Contains(p.Body, `data-run="ui-steps"`), "%s shows the run: %v", query, shown)
		}
		rows := historytest.Get(t, base, "/ui/?fragment=rows&prefix=ui-")
		require.Equal(t, http.StatusOK, rows.Status)
		require.NotContains(t, rows.Body, "<html", "the fragment is the rows alone")
		require.Contains(t, rows.Body, `data-run="ui-steps"`)
	})

	t.Run("ListBadFilters", func(t *testing.T) {
		p := historytest.Get(t, base, "/ui/?status=sleeping")
		require.Equal(t, http.StatusBadRequest, p.Status)
		require.Contains(t, p.Text(t, "error"), "400")
		require.Contains(t, p.Body, `unknown status &#34;sleeping&#34;; use one of pending`)
		p = historytest.Get(t, base, "/ui/?limit=many")
		require.Equal(t, http.StatusBadRequest, p.Status)
		require.Contains(t, p.Body, "limit must be a number")
		p = historytest.Get(t, base, "/ui/?cursor=nonsense")
		require.Equal(t, http.StatusBadRequest, p.Status)
		require.Contains(t, p.Body, "is not one a listing returned")
	})

	t.Run("RunPageLatest", func(t *testing.T) {
		p := historytest.Get(t, base, "/ui/runs/"+runID)
		require.Equal(t, http.StatusOK, p.Status)
		require.Equal(t, fmt.Sprint(last), p.Text(t, "snap-seq"))
		require.Equal(t, "3", p.Text(t, "steps-completed"))
		require.Equal(t, int(last), strings.Count(p.Body, `class="ev-row`), "the timeline shows every event")
		require.Contains(t, p.Body, `id="following"`)
		require.Regexp(t, `id="step-forward"[^>]*disabled`, p.Body, "no step forward from the last event")
		require.Regexp(t, `<section class="actions" id="actions" hidden`, p.Body, "no signal or cancel on an ended run")
		require.Contains(t, p.Body, `<section class="panel outcome outcome-completed" id="outcome">`)
		require.Contains(t, p.Body, "run.completed")
	})

	t.Run("RunPageAtEachSequence", func(t *testing.T) {
		prev := -1
		for at := uint64(1); at <= last; at++ {
			p := historytest.Get(t, base, fmt.Sprintf("/ui/runs/%s?at=%d&fragment=view", runID, at))
			require.Equal(t, http.StatusOK, p.Status)
			require.NotContains(t, p.Body, "<html")
			require.Equal(t, fmt.Sprint(at), p.Text(t, "snap-seq"))
			n := 0
			_, _ = fmt.Sscan(p.Text(t, "steps-completed"), &n)
			require.GreaterOrEqual(t, n, prev, "completed steps never decrease with the sequence")
			prev = n
			require.Contains(t, p.Body, fmt.Sprintf(`class="ev-row current" data-seq="%d"`, at))
			require.Equal(t, int(last-at), strings.Count(p.Body, "ev-row future"), "the events after at=%d are marked", at)
			if at == 1 {
				require.Equal(t, "0", p.Text(t, "steps-completed"))
				require.Regexp(t, `id="step-back" data-at="1"[^>]*disabled`, p.Body, "no step back from the first event")
				require.Contains(t, p.Body, `id="pinned"`)
			} else {
				require.Regexp(t, fmt.Sprintf(`id="step-back" data-at="%d" title`, at-1), p.Body)
			}
			if at < last {
				require.Regexp(t, fmt.Sprintf(`id="step-forward" data-at="%d" title`, at+1), p.Body)
			}
		}
		require.Equal(t, 3, prev)
	})

	t.Run("RunPageBadInput", func(t *testing.T) {
		for query, want := range map[string]string{
			fmt.Sprintf("?at=%d", last+1): fmt.Sprintf("at=%d is past the end: run &#34;ui-steps&#34; has %d events; pick a sequence from 1 to %d", last+1, last, last),
			"?at=0":                       "at must be a sequence number from 1 up",
			"?at=-3":                      "at must be a sequence number from 1 up",
			"?at=seven":                   "at must be a sequence number from 1 up (or &#34;latest&#34;), got &#34;seven&#34;",
		} {
			p := historytest.Get(t, base, "/ui/runs/"+runID+query)
			require.Equal(t, http.StatusBadRequest, p.Status, query)
			require.Contains(t, p.Body, "400 · Bad request", query)
			require.Contains(t, p.Body, want, query)
		}
		p := historytest.Get(t, base, "/ui/runs/no-such-run")
		require.Equal(t, http.StatusNotFound, p.Status)
		require.Contains(t, p.Body, "404 · Not found")
		require.Contains(t, p.Body, "run &#34;no-such-run&#34; does not exist")
		p = historytest.Get(t, base, "/ui/runs/bad.id")
		require.Equal(t, http.StatusBadRequest, p.Status)
		p = historytest.Get(t, base, "/ui/nowhere")
		require.Equal(t, http.StatusNotFound, p.Status)
		require.Contains(t, p.Body, "is not a page of the web UI")
	})

	t.Run("Static", func(t *testing.T) {
		for _, f := range []string{"/ui/static/ui.css", "/ui/static/ui.js"} {
			p := historytest.Get(t, base, f)
			require.Equal(t, http.StatusOK, p.Status, f)
			require.NotEmpty(t, p.Body, f)
		}
	})
}

func TestUIActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := b.history.HTTPAddr()
	self := "http://" + base
	runID, err := b.client.Start(b.ctx, "await", nil, &flow.StartOptions{RunID: "ui-await"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s, err := b.client.Snapshot(b.ctx, runID)
		return err == nil && len(s.SignalWaits) == 1
	}, 10*time.Second, 5*time.Millisecond, "the run waits for its signal")
	p := historytest.Get(t, base, "/ui/runs/"+runID)
	require.Equal(t, http.StatusOK, p.Status)
	require.NotRegexp(t, `id="actions" hidden`, p.Body, "a waiting run offers signal and cancel")
	require.Contains(t, p.Body, `value="go"`, "the signal form suggests the awaited signal")
	require.Contains(t, p.Body, `<span class="badge sst-running">waiting</span>`)

	t.Run("CrossOriginRefused", func(t *testing.T) {
		p := historytest.Post(t, base, "/ui/runs/"+runID+"/signal", "application/json", "http://evil.example", `{"name":"go"}`)
		require.Equal(t, http.StatusForbidden, p.Status)
		p = historytest.Post(t, base, "/ui/runs/"+runID+"/cancel", "application/x-www-form-urlencoded", "http://evil.example", "reason=x")
		require.Equal(t, http.StatusForbidden, p.Status)
	})

	// Finding 6: a plain form POST from curl cancelled a run. Without tokens configured it
	// still needs the page's CSRF token.
	t.Run("CurlWithoutCSRFRefused", func(t *testing.T) {
		for _, action := range []string{"signal", "cancel", "pause", "unpause"} {
			p := historytest.Post(t, base, "/ui/runs/"+runID+"/"+action, "application/x-www-form-urlencoded", "", "name=go&reason=curl")
			require.Equal(t, http.StatusForbidden, p.Status, action)
			require.Contains(t, p.Body, "CSRF", action)
		}
		s, err := b.client.Snapshot(b.ctx, runID)
		require.NoError(t, err)
		require.Empty(t, s.Signals)
		require.False(t, s.Terminal())
	})

	t.Run("BadRequests", func(t *testing.T) {
		for body, want := range map[string]string{
			`{"name":""}`:                     "invalid_name",
			`not json`:                        "invalid_json",
			`{"name":"bad name","payload":1}`: "invalid",
		} {
			p := historytest.Post(t, base, "/ui/runs/"+runID+"/signal", "application/json", self, body)
			require.Equal(t, http.StatusBadRequest, p.Status, body)
			require.Contains(t, p.Body, want, body)
		}
		p := historytest.Post(t, base, "/ui/runs/"+runID+"/signal", "text/plain", self, "go")
		require.Equal(t, http.StatusUnsupportedMediaType, p.Status)
		p = historytest.Post(t, base, "/ui/runs/"+runID+"/signal", "application/x-www-form-urlencoded", self, "name=go&payload=%7Bx")
		require.Equal(t, http.StatusSeeOther, p.Status, "a form is answered with a redirect to the run page")
		loc, err := url.Parse(p.Header.Get("Location"))
		require.NoError(t, err)
		require.Equal(t, "/ui/runs/"+runID, loc.Path)
		require.Contains(t, loc.Query().Get("error"), "the payload is not JSON")
		shown := historytest.Get(t, base, loc.String())
		require.Contains(t, shown.Text(t, "action-msg"), "the payload is not JSON")
	})

	t.Run("SignalThenRefusedOnceEnded", func(t *testing.T) {
		p := historytest.Post(t, base, "/ui/runs/"+runID+"/signal", "application/json", self, `{"name":"go","payload":{"note":"from the UI"}}`)
		require.Equal(t, http.StatusOK, p.Status, p.Body)
		var rep struct {
			RunID string `json:"run_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(p.Body), &rep))
		require.Equal(t, runID, rep.RunID)
		var got map[string]string
		require.NoError(t, b.client.Result(b.ctx, runID, &got))
		require.Equal(t, map[string]string{"note": "from the UI"}, got)

		p = historytest.Post(t, base, "/ui/runs/"+runID+"/signal", "application/json", self, `{"name":"go"}`)
		require.Equal(t, http.StatusConflict, p.Status, p.Body)
		var refused struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(p.Body), &refused))
		require.Equal(t, "run_ended", refused.Error.Code)
		require.Contains(t, refused.Error.Message, "ended")
		p = historytest.Post(t, base, "/ui/runs/"+runID+"/cancel", "application/json", self, `{}`)
		require.Equal(t, http.StatusConflict, p.Status, p.Body)
		require.Contains(t, p.Body, "run_ended")
	})

	t.Run("Cancel", func(t *testing.T) {
		other, err := b.client.Start(b.ctx, "await", nil, &flow.StartOptions{RunID: "ui-await-cancel"})
		require.NoError(t, err)
		p := historytest.Post(t, base, "/ui/runs/"+other+"/cancel", "application/x-www-form-urlencoded", self, "reason=enough")
		require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
		require.Contains(t, p.Header.Get("Location"), "notice=")
		var runErr *flow.RunError
		require.ErrorAs(t, b.client.Result(b.ctx, other, nil), &runErr)
		require.Equal(t, flow.StatusCancelled, runErr.Status)
		p = historytest.Post(t, base, "/ui/runs/nobody-here/cancel", "application/json", self, `{}`)
		require.Equal(t, http.StatusNotFound, p.Status, p.Body)
		require.Contains(t, p.Body, "run_not_found")
	})
}

func TestUIDiagnosis(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h := startHistory(t, srv)
	base := h.HTTPAddr()
	// A run whose code changed: the worker of build b2 now reserves "sku-2" where history has
	// "sku-1" (history written directly: no worker serves the definition, so nothing else
	// decides it).
	st, err := jsstore.New(t.Context(), natstest.JetStream(t, srv), &jsstore.Options{Source: "flow/test"})
	require.NoError(t, err)
	now := time.Now().UTC()
	nd := &core.NonDeterminismError{RunID: "ui-blocked", Kind: "step", ID: "reserve", Field: "input",
		Recorded: `{"sku":"sku-1"}`, New: `{"sku":"sku-2"}`, Seq: 2}
	_, err = st.Append(t.Context(), "ui-blocked", 0,
		event.Event{Time: now, Payload: &event.RunStarted{Spec: event.Spec{Definition: "changed"}, Input: json.RawMessage(`{}`), Seed: "s"}},
		event.Event{Time: now, Payload: &event.StepScheduled{Steps: []event.StepSpec{{ID: "reserve", Name: "reserveStock", Input: json.RawMessage(`{"sku":"sku-1"}`), Retry: event.RetryPolicy{}.Normalize()}}}},
		event.Event{Time: now, Payload: &event.StepCompleted{StepID: "reserve", Attempt: 1, Output: json.RawMessage(`"ok"`)}},
		event.Event{Time: now, Payload: core.DecisionFailure(nd, "b2")})
	require.NoError(t, err)

	p := historytest.Get(t, base, "/ui/runs/ui-blocked")
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

	before := historytest.Get(t, base, "/ui/runs/ui-blocked?at=3")
	require.Equal(t, http.StatusOK, before.Status)
	require.NotContains(t, before.Body, `id="diagnosis"`, "not blocked yet at seq 3")
	require.Contains(t, before.Body, "The run is blocked now")
}
