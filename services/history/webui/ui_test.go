package webui_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/pkg/flow"
)

func TestUIPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const runID = "ui-steps"
	b.completedSteps(t, runID, 3)
	hist, err := b.Client.History(b.Ctx, runID, 0)
	require.NoError(t, err)
	last := hist[len(hist)-1].Seq

	t.Run("RootRedirects", func(t *testing.T) {
		p := historytest.Get(t, b.base, "/")
		require.Equal(t, http.StatusFound, p.Status)
		require.Equal(t, "/ui/", p.Header.Get("Location"))
	})

	t.Run("RunsList", func(t *testing.T) {
		require.Eventually(t, func() bool {
			p := historytest.Get(t, b.base, "/ui/?status=completed")
			return p.Status == http.StatusOK && strings.Contains(p.Body, `href="/ui/runs/ui-steps"`)
		}, 10*time.Second, 10*time.Millisecond, "the list shows the completed run once the index has it")
		p := historytest.Get(t, b.base, "/ui/")
		require.Equal(t, http.StatusOK, p.Status)
		require.Contains(t, p.Header.Get("Content-Type"), "text/html")
		require.Contains(t, p.Header.Get("Content-Security-Policy"), "default-src 'self'")
		require.Contains(t, p.Body, `<span class="badge st-completed">completed</span>`)
		require.Contains(t, p.Body, `<option value="steps">steps</option>`, "the definition filter offers the served definitions")
		for query, shown := range map[string]bool{
			"?status=suspended": false, "?status=completed&definition=steps": true, "?definition=nap": false,
			"?prefix=ui-st": true, "?prefix=zz": false, "?prefix=ui-&status=completed,suspended": true,
		} {
			p := historytest.Get(t, b.base, "/ui/"+query)
			require.Equal(t, http.StatusOK, p.Status, query)
			require.Equal(t, shown, strings.Contains(p.Body, `data-run="ui-steps"`), "%s shows the run: %v", query, shown)
		}
		rows := historytest.Get(t, b.base, "/ui/?fragment=rows&prefix=ui-")
		require.Equal(t, http.StatusOK, rows.Status)
		require.NotContains(t, rows.Body, "<html", "the fragment is the rows alone")
		require.Contains(t, rows.Body, `data-run="ui-steps"`)
	})

	t.Run("ListBadFilters", func(t *testing.T) {
		p := historytest.Get(t, b.base, "/ui/?status=sleeping")
		require.Equal(t, http.StatusBadRequest, p.Status)
		require.Contains(t, p.Text(t, "error"), "400")
		require.Contains(t, p.Body, `unknown status &#34;sleeping&#34;; use one of pending`)
		p = historytest.Get(t, b.base, "/ui/?limit=many")
		require.Equal(t, http.StatusBadRequest, p.Status)
		require.Contains(t, p.Body, "limit must be a number")
		p = historytest.Get(t, b.base, "/ui/?cursor=nonsense")
		require.Equal(t, http.StatusBadRequest, p.Status)
		require.Contains(t, p.Body, "is not one a listing returned")
	})

	t.Run("RunPageLatest", func(t *testing.T) {
		p := historytest.Get(t, b.base, "/ui/runs/"+runID)
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
			p := historytest.Get(t, b.base, fmt.Sprintf("/ui/runs/%s?at=%d&fragment=view", runID, at))
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
			p := historytest.Get(t, b.base, "/ui/runs/"+runID+query)
			require.Equal(t, http.StatusBadRequest, p.Status, query)
			require.Contains(t, p.Body, "400 · Bad request", query)
			require.Contains(t, p.Body, want, query)
		}
		p := historytest.Get(t, b.base, "/ui/runs/no-such-run")
		require.Equal(t, http.StatusNotFound, p.Status)
		require.Contains(t, p.Body, "404 · Not found")
		require.Contains(t, p.Body, "run &#34;no-such-run&#34; does not exist")
		p = historytest.Get(t, b.base, "/ui/runs/bad.id")
		require.Equal(t, http.StatusBadRequest, p.Status)
		p = historytest.Get(t, b.base, "/ui/nowhere")
		require.Equal(t, http.StatusNotFound, p.Status)
		require.Contains(t, p.Body, "is not a page of the web UI")
	})

	t.Run("Static", func(t *testing.T) {
		for _, f := range []string{"/ui/static/ui.css", "/ui/static/ui.js"} {
			p := historytest.Get(t, b.base, f)
			require.Equal(t, http.StatusOK, p.Status, f)
			require.NotEmpty(t, p.Body, f)
		}
	})
}

func TestUIActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	self := "http://" + b.base
	runID, err := b.Client.Start(b.Ctx, "await", nil, &flow.StartOptions{RunID: "ui-await"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s, err := b.Client.Snapshot(b.Ctx, runID)
		return err == nil && len(s.SignalWaits) == 1
	}, 10*time.Second, 5*time.Millisecond, "the run waits for its signal")
	p := historytest.Get(t, b.base, "/ui/runs/"+runID)
	require.Equal(t, http.StatusOK, p.Status)
	require.NotRegexp(t, `id="actions" hidden`, p.Body, "a waiting run offers signal and cancel")
	require.Contains(t, p.Body, `value="go"`, "the signal form suggests the awaited signal")
	require.Contains(t, p.Body, `<span class="badge sst-running">waiting</span>`)

	t.Run("CrossOriginRefused", func(t *testing.T) {
		p := historytest.Post(t, b.base, "/ui/runs/"+runID+"/signal", "application/json", "http://evil.example", `{"name":"go"}`)
		require.Equal(t, http.StatusForbidden, p.Status)
		p = historytest.Post(t, b.base, "/ui/runs/"+runID+"/cancel", "application/x-www-form-urlencoded", "http://evil.example", "reason=x")
		require.Equal(t, http.StatusForbidden, p.Status)
	})

	// Finding 6: a plain form POST from curl cancelled a run. Without tokens configured it
	// still needs the page's CSRF token.
	t.Run("CurlWithoutCSRFRefused", func(t *testing.T) {
		for _, action := range []string{"signal", "cancel", "pause", "unpause"} {
			p := historytest.Post(t, b.base, "/ui/runs/"+runID+"/"+action, "application/x-www-form-urlencoded", "", "name=go&reason=curl")
			require.Equal(t, http.StatusForbidden, p.Status, action)
			require.Contains(t, p.Body, "CSRF", action)
		}
		s, err := b.Client.Snapshot(b.Ctx, runID)
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
			p := historytest.Post(t, b.base, "/ui/runs/"+runID+"/signal", "application/json", self, body)
			require.Equal(t, http.StatusBadRequest, p.Status, body)
			require.Contains(t, p.Body, want, body)
		}
		p := historytest.Post(t, b.base, "/ui/runs/"+runID+"/signal", "text/plain", self, "go")
		require.Equal(t, http.StatusUnsupportedMediaType, p.Status)
		p = historytest.Post(t, b.base, "/ui/runs/"+runID+"/signal", "application/x-www-form-urlencoded", self, "name=go&payload=%7Bx")
		require.Equal(t, http.StatusSeeOther, p.Status, "a form is answered with a redirect to the run page")
		loc, err := url.Parse(p.Header.Get("Location"))
		require.NoError(t, err)
		require.Equal(t, "/ui/runs/"+runID, loc.Path)
		require.Contains(t, loc.Query().Get("error"), "the payload is not JSON")
		shown := historytest.Get(t, b.base, loc.String())
		require.Contains(t, shown.Text(t, "action-msg"), "the payload is not JSON")
	})

	t.Run("SignalThenRefusedOnceEnded", func(t *testing.T) {
		p := historytest.Post(t, b.base, "/ui/runs/"+runID+"/signal", "application/json", self, `{"name":"go","payload":{"note":"from the UI"}}`)
		require.Equal(t, http.StatusOK, p.Status, p.Body)
		var rep struct {
			RunID string `json:"run_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(p.Body), &rep))
		require.Equal(t, runID, rep.RunID)
		var got map[string]string
		require.NoError(t, b.Client.Result(b.Ctx, runID, &got))
		require.Equal(t, map[string]string{"note": "from the UI"}, got)

		p = historytest.Post(t, b.base, "/ui/runs/"+runID+"/signal", "application/json", self, `{"name":"go"}`)
		require.Equal(t, http.StatusConflict, p.Status, p.Body)
		var refused struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(p.Body), &refused))
		require.Equal(t, "run_ended", refused.Error.Code)
		require.Contains(t, refused.Error.Message, "ended")
		p = historytest.Post(t, b.base, "/ui/runs/"+runID+"/cancel", "application/json", self, `{}`)
		require.Equal(t, http.StatusConflict, p.Status, p.Body)
		require.Contains(t, p.Body, "run_ended")
	})

	t.Run("Cancel", func(t *testing.T) {
		other, err := b.Client.Start(b.Ctx, "await", nil, &flow.StartOptions{RunID: "ui-await-cancel"})
		require.NoError(t, err)
		p := historytest.Post(t, b.base, "/ui/runs/"+other+"/cancel", "application/x-www-form-urlencoded", self, "reason=enough")
		require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
		require.Contains(t, p.Header.Get("Location"), "notice=")
		var runErr *flow.RunError
		require.ErrorAs(t, b.Client.Result(b.Ctx, other, nil), &runErr)
		require.Equal(t, flow.StatusCancelled, runErr.Status)
		p = historytest.Post(t, b.base, "/ui/runs/nobody-here/cancel", "application/json", self, `{}`)
		require.Equal(t, http.StatusNotFound, p.Status, p.Body)
		require.Contains(t, p.Body, "run_not_found")
	})
}

// TestUIBatches: the batch jobs page lists a job, and its page shows the report, with the
// skipped runs linked by reason.
func TestUIBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.completedSteps(t, "ui-batch-done", 1)
	require.Eventually(t, func() bool {
		p, err := b.Client.Runs(b.Ctx, &flow.RunsFilter{Where: `run_id = "ui-batch-done" and status = "completed"`})
		return err == nil && p.Total == 1
	}, 10*time.Second, 10*time.Millisecond)

	p := historytest.Get(t, b.base, "/ui/batches")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "No batch jobs yet")

	_, err := b.Client.Batches().Start(b.Ctx, flow.BatchSpec{Op: flow.BatchCancel, Where: `run_id = "ui-batch-done"`}, &flow.BatchOptions{ID: "ui-job"})
	require.NoError(t, err)
	j, err := b.Client.Batches().Await(b.Ctx, "ui-job")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"already completed": 1}, j.Skipped)

	p = historytest.Get(t, b.base, "/ui/batches")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `href="/ui/batches/ui-job"`)
	require.Contains(t, p.Body, `href="/ui/batches">Batch jobs</a>`, "the navigation links the page")
	p = historytest.Get(t, b.base, "/ui/batches/ui-job")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Contains(t, p.Body, "completed")
	require.True(t, strings.Contains(p.Body, `1 already completed: <a class="mono" href="/ui/runs/ui-batch-done">ui-batch-done</a>`), p.Body)
	p = historytest.Get(t, b.base, "/ui/batches/nope")
	require.Equal(t, http.StatusNotFound, p.Status)
}

// The run pages of a reset's two runs link to each other, and the history lines say what
// run.reset and reset_from record; the runs index entries name the other run.
func TestUIResetLinks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const runID = "ui-reset"
	b.completedSteps(t, runID, 2)
	r, err := b.Client.Reset(b.Ctx, runID, &flow.ResetOptions{LastDecision: true, Reason: "ui"})
	require.NoError(t, err)
	require.NoError(t, b.Client.Result(b.Ctx, r.NewRunID, new(int)))

	old := historytest.Get(t, b.base, "/ui/runs/ui-reset")
	require.Equal(t, http.StatusOK, old.Status)
	require.Contains(t, old.Body, "<dt>reset as</dt>")
	require.Contains(t, old.Body, `href="/ui/runs/`+r.NewRunID+`"`)
	require.Contains(t, old.Body, "reset as run "+r.NewRunID)
	nw := historytest.Get(t, b.base, "/ui/runs/"+r.NewRunID)
	require.Equal(t, http.StatusOK, nw.Status)
	require.Contains(t, nw.Body, "<dt>reset from</dt>")
	require.Contains(t, nw.Body, `href="/ui/runs/ui-reset"`)
	require.True(t, strings.Contains(nw.Body, "reset from ui-reset at seq"), "the run.started line names the old run")

	require.Eventually(t, func() bool {
		page, err := b.Client.Runs(b.Ctx, &flow.RunsFilter{Definition: "steps"})
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

// The schedules pages list a schedule and describe it with its recent actions (linked to their
// runs) and next actions; the run page and the timeline of a scheduled run name the schedule
// and the slot.
func TestUISchedules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := historytest.Get(t, b.base, "/ui/schedules")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "No schedules yet")

	var err error
	// The worker registers "steps" a moment after it started.
	require.Eventually(t, func() bool {
		_, err = b.Client.Schedules().Create(b.Ctx, "ui-tick", flow.ScheduleConfig{Every: time.Second, Definition: "steps", Input: 1,
			Overlap: flow.OverlapAllowAll})
		return !errors.Is(err, flow.ErrNoWorker)
	}, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, err)
	var d *flow.ScheduleDescription
	require.Eventually(t, func() bool {
		d, err = b.Client.Schedules().Describe(b.Ctx, "ui-tick", 0)
		return err == nil && d.Schedule.State.Started >= 1
	}, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, b.Client.Schedules().Pause(b.Ctx, "ui-tick", "ui test"))
	run := d.Schedule.State.Recent[0].RunID

	p = historytest.Get(t, b.base, "/ui/schedules")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `<a href="/ui/schedules/ui-tick">ui-tick</a>`)
	require.Contains(t, p.Body, "every 1s")
	require.Contains(t, p.Body, "paused")

	p = historytest.Get(t, b.base, "/ui/schedules/ui-tick")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "Recent actions")
	require.Contains(t, p.Body, `<a href="/ui/runs/`+run+`">`+run+`</a>`)
	require.Contains(t, p.Body, "allow_all")
	require.Contains(t, p.Body, "Paused: no action until unpaused.")

	require.Eventually(t, func() bool {
		p = historytest.Get(t, b.base, "/ui/runs/"+run)
		return p.Status == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, p.Body, "<dt>schedule</dt>")
	require.Contains(t, p.Body, "by schedule ui-tick for slot ")

	p = historytest.Get(t, b.base, "/ui/schedules/nope")
	require.Equal(t, http.StatusNotFound, p.Status)
	require.NoError(t, b.Client.Schedules().Delete(b.Ctx, "ui-tick"))
}

// The run page shows a delayed run's delay, and a run that replaced another links to it; the
// timeline says which start policy applied.
func TestUIShowsStartPolicies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.Client.Start(b.Ctx, "await", nil, &flow.StartOptions{RunID: "ui-later", Delay: time.Hour})
	require.NoError(t, err)
	p := historytest.Get(t, b.base, "/ui/runs/ui-later")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "<dt>delayed</dt>")
	require.Contains(t, p.Body, "delayed until ")

	id, err := b.Client.Start(b.Ctx, "await", 2, &flow.StartOptions{RunID: "ui-later", OnConflict: flow.ConflictTerminateExisting})
	require.NoError(t, err)
	require.Equal(t, "ui-later=_1", id)
	p = historytest.Get(t, b.base, "/ui/runs/"+id)
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "<dt>replaces</dt>")
	require.Contains(t, p.Body, "replaces run ui-later (terminate_existing)")
}
