package webui_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/scheduler"
)

// chromium returns the path of a Chromium to drive, skipping the test when there is none unless
// FLOW_REQUIRE_BROWSER=1 (as `make test` sets after scripts/test-deps.sh installed it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("FLOW_REQUIRE_BROWSER") == "1" {
		t.Fatal("no chromium on PATH and FLOW_REQUIRE_BROWSER=1: run scripts/test-deps.sh (installs Debian's chromium package)")
	}
	t.Skip("skipping the browser test: no chromium on PATH (install Debian's chromium package, or run scripts/test-deps.sh)")
	return ""
}

// TestUIBrowser drives the web UI in headless Chromium: it opens a completed order run from the
// runs list and steps it back through time, then signals a waiting approval run from its page
// and sees it complete live. It saves a full-page screenshot of the order run seen at an earlier
// sequence to the test's artifact directory, and to docs/images/ui-run.png with
// FLOW_UI_SCREENSHOT=1.
func TestUIBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	srv := natstest.RunJetStream(t)
	h := historytest.StartHistory(t, srv)
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	examples.RegisterWith(reg, examples.Options{Logger: quiet})
	historytest.StartWorker(t, srv, reg)
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, s.Stop()) })
	client, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	order, err := client.Start(ctx, "order", examples.OrderInput{SKU: "sku-8842", Qty: 2, Amount: 42}, &flow.StartOptions{RunID: "order-1042"})
	require.NoError(t, err)
	require.NoError(t, client.Result(ctx, order, nil))
	hist, err := client.History(ctx, order, 0)
	require.NoError(t, err)
	last := hist[len(hist)-1].Seq
	approval, err := client.Start(ctx, "approval", examples.ApprovalInput{Who: "ann", Timeout: "10m"}, &flow.StartOptions{RunID: "approval-7"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		snap, err := client.Snapshot(ctx, approval)
		return err == nil && len(snap.SignalWaits) == 1
	}, 30*time.Second, 10*time.Millisecond, "the approval run waits for its signal")

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1440, 900))...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	var jsMu sync.Mutex
	var jsErrors []string
	require.NoError(t, chromedp.Listen(browser, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok {
			jsMu.Lock()
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			jsErrors = append(jsErrors, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber+1, msg))
			jsMu.Unlock()
		}
	}), "starting chromium")
	base := "http://" + h.HTTPAddr()
	// seqIs waits until the page shows the snapshot at seq.
	seqIs := func(seq uint64) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelector("#snap-seq")?.textContent.trim() === "%d"`, seq),
			chromedp.WithPollingTimeout(20*time.Second))
	}
	text := func(sel string) string {
		s, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, sel)
		return strings.TrimSpace(s)
	}
	completedBy := func(seq uint64) int {
		n := 0
		for _, e := range hist[:seq] {
			if e.Type() == event.TypeStepCompleted {
				n++
			}
		}
		return n
	}

	// The runs list shows both runs (it refreshes itself until the index has them).
	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-run="`+order+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-run="`+approval+`"]`)),
		chromedp.Click(chromedp.CSS(`a[href="/ui/runs/`+order+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline`)),
		seqIs(last),
	))
	require.Equal(t, "3", text("#steps-completed"))
	require.Equal(t, "completed", text(".run-head .badge"))

	// Step back through time, one event per click, until a step is not completed yet.
	at := last
	for completedBy(at) == 3 {
		at--
		require.NoError(t, chromedp.Do(browser, chromedp.Click(chromedp.CSS(`#step-back`)), seqIs(at)), "step back to %d", at)
	}
	require.Equal(t, "2", text("#steps-completed"), "at seq %d the last step has not completed", at)
	require.NotEqual(t, "completed", text(".run-head .badge"), "at seq %d the run has not ended", at)
	// Further back with the keyboard and the sequence field, then forward again.
	require.NoError(t, chromedp.Do(browser,
		chromedp.KeyEvent(kb.ArrowLeft), seqIs(at-1),
		chromedp.SetValue(chromedp.CSS(`#seq-input`), ""),
		chromedp.SendKeys(chromedp.CSS(`#seq-input`), "1"+kb.Enter), seqIs(1),
	))
	require.Equal(t, "0", text("#steps-completed"))
	require.Equal(t, "pending", text(".run-head .badge"))
	mid, failedSeq := uint64(0), uint64(0)
	for _, e := range hist { // the charge's retry in flight: the screenshot's moment
		switch e.Type() {
		case event.TypeStepRetryFired:
			mid = e.Seq
		case event.TypeStepFailed:
			failedSeq = e.Seq
		}
	}
	require.NotZero(t, mid, "the order run retried its charge")
	for seq := uint64(2); seq <= mid; seq++ {
		require.NoError(t, chromedp.Do(browser, chromedp.Click(chromedp.CSS(`#step-forward`)), seqIs(seq)))
	}
	require.Equal(t, fmt.Sprint(completedBy(mid)), text("#steps-completed"))
	failed := fmt.Sprintf(`#timeline details[data-seq="%d"]`, failedSeq) // the failed attempt, its JSON expanded
	require.NoError(t, chromedp.Do(browser,
		chromedp.Evaluate[chromedp.Void](`document.querySelector('`+failed+`').open = true`),
		chromedp.WaitVisible(chromedp.CSS(failed+` pre`))))
	png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	saveScreenshot(t, "ui-run.png", png)

	// The filter box: a filter selects the approval run only; a mistyped one is shown, not run.
	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-run="`+order+`"]`)),
		// Marks this page, so that the waits below see the page the filter loads, not this one.
		chromedp.Evaluate[chromedp.Void](`document.body.dataset.before = "1"`),
		chromedp.SendKeys(chromedp.CSS(`input[name="where"]`), `definition = "approval" and started > "2000-01-01"`+kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(`body:not([data-before]) tr[data-run="`+approval+`"]`)),
	))
	require.Equal(t, 0, count(t, browser, `tr[data-run="`+order+`"]`), "the filter leaves the order run out")
	require.NoError(t, chromedp.Do(browser,
		chromedp.Evaluate[chromedp.Void](`document.querySelector('input[name="where"]').value = ""`),
		chromedp.SendKeys(chromedp.CSS(`input[name="where"]`), `definition == "approval"`+kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(`body:not([data-before]) .where-error`)),
	))
	require.Contains(t, text(".where-error"), `"==" is not an operator; write "=" for equality`)

	// The approval run: signal it from its page and watch it complete.
	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(base+"/ui/?definition=approval"),
		chromedp.Click(chromedp.CSS(`a[href="/ui/runs/`+approval+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#signal-form`)),
	))
	require.Equal(t, "suspended", text(".run-head .badge"))
	name, err := chromedp.Run(browser, chromedp.Value(chromedp.CSS(`#signal-name`)))
	require.NoError(t, err)
	require.Equal(t, examples.ApprovalSignal, name, "the form suggests the awaited signal")
	require.NoError(t, chromedp.Do(browser,
		chromedp.SendKeys(chromedp.CSS(`#signal-payload`), `{"note":"looks good"}`),
		chromedp.Click(chromedp.CSS(`#signal-send`)),
		chromedp.WaitVisible(chromedp.CSS(`#action-msg.ok`)),
		chromedp.Poll[chromedp.Void](`document.querySelector("#run-view")?.dataset.latestStatus === "completed" && !!document.querySelector("#outcome")`,
			chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.WaitNotVisible(chromedp.CSS(`#actions`)),
	))
	require.Equal(t, "completed", text(".run-head .badge"))
	require.Contains(t, text("#outcome pre"), `"note": "looks good"`)
	require.Contains(t, text("#action-msg"), "recorded in run "+approval)
	png, err = chromedp.Run(browser, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	saveScreenshot(t, "ui-approval.png", png)
	jsMu.Lock()
	defer jsMu.Unlock()
	require.Empty(t, jsErrors, "the pages' script threw")
}

// saveScreenshot writes a PNG to the test's artifact directory, and ui-run.png to docs/images
// with FLOW_UI_SCREENSHOT=1.
func saveScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	path := filepath.Join(t.ArtifactDir(), name)
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
	if name == "ui-run.png" && os.Getenv("FLOW_UI_SCREENSHOT") == "1" {
		docs := filepath.Join("..", "..", "..", "docs", "images", name)
		require.NoError(t, os.MkdirAll(filepath.Dir(docs), 0o755))
		require.NoError(t, os.WriteFile(docs, png, 0o644))
		t.Logf("screenshot: %s", docs)
	}
}

// count returns how many elements match sel in the page.
func count(t *testing.T, browser context.Context, sel string) int {
	t.Helper()
	n, err := chromedp.Run(browser, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
	require.NoError(t, err, sel)
	return n
}
