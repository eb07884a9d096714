// Package historytest starts the history service for its tests and for those of its web UI
// (services/history/webui): on a test NATS server, with an ingress for the UI's actions, a
// worker of test workflows and a scheduler; and it fetches the UI's pages over HTTP.
package historytest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// Quiet is the services' logger in tests.
var Quiet = natstest.Logger()

// Bundle is what Setup started. Ctx ends 60 seconds after Setup, or with the test.
type Bundle struct {
	Srv     *natsserver.Server
	JS      jetstream.JetStream
	History *history.Service
	Client  *flow.Client
	Ctx     context.Context
}

// Setup starts a server, a history service (HTTP on a free port) and its ingress, a scheduler
// and a worker of the test workflows (Registry), and returns a client. Everything stops when the
// test ends.
func Setup(t *testing.T) *Bundle {
	t.Helper()
	srv := natstest.RunJetStream(t)
	h := StartHistory(t, srv)
	StartWorker(t, srv, Registry(""))
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: Quiet})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, s.Stop()) })
	// The ingress forwards the changes of schedules and batch jobs to the scheduler's leaders.
	require.Eventually(t, func() bool { return s.AnswersSchedules() && s.AnswersBatches() }, 20*time.Second, 5*time.Millisecond,
		"the scheduler leads the schedule runner and the batch executor")
	c, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return &Bundle{Srv: srv, JS: natstest.JetStream(t, srv), History: h, Client: c, Ctx: ctx}
}

// Start starts a history service with cfg as it is (cfg.Conn or cfg.NATS, cfg.HTTPAddr "" for
// the default address) and stops it when the test or benchmark ends, ignoring Stop's error as
// ingresstest.Start does.
func Start(tb testing.TB, cfg history.Config) *history.Service {
	tb.Helper()
	h, err := history.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := h.Start(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = h.Stop() })
	return h
}

// StartHistory starts a history service and its ingress on srv with the default configuration.
func StartHistory(t *testing.T, srv *natsserver.Server) *history.Service {
	t.Helper()
	return StartHistoryWith(t, srv, history.Config{}, ingress.Config{})
}

// StartHistoryWith starts a history service configured by hcfg and an ingress configured by
// icfg (both on srv, HTTP on free loopback ports), the history's web UI forwarding its actions
// to the ingress. Both stop when the test ends.
func StartHistoryWith(t *testing.T, srv *natsserver.Server, hcfg history.Config, icfg ingress.Config) *history.Service {
	t.Helper()
	icfg.Conn, icfg.HTTPAddr, icfg.Logger = natstest.Connect(t, srv), "127.0.0.1:0", Quiet
	in := ingresstest.Start(t, icfg)
	hcfg.Conn, hcfg.HTTPAddr, hcfg.Logger = natstest.Connect(t, srv), "127.0.0.1:0", Quiet
	hcfg.IngressURL = "http://" + in.HTTPAddr()
	h, err := history.New(hcfg)
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	return h
}

// StartWorker starts a worker of reg on srv, stopped when the test ends.
func StartWorker(t *testing.T, srv *natsserver.Server, reg *flow.Registry) *worker.Worker {
	t.Helper()
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: Quiet}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	return w
}

// Registry returns the test workflows of build buildID: steps (n sequential steps), await (a
// signal), nap (a sleep) and hook (a hook with an explicit token).
func Registry(buildID string) *flow.Registry {
	reg := flow.NewRegistry(&flow.RegistryOptions{BuildID: buildID, Logger: Quiet})
	flow.RegisterWorkflow(reg, "steps", Steps)
	flow.RegisterStep(reg, "inc", Inc)
	flow.RegisterWorkflow(reg, "await", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if v := ctx.Signal("go"); v != nil {
			return ctx.Complete(v), nil
		}
		return ctx.AwaitSignal("go", "go"), nil
	})
	flow.RegisterWorkflow(reg, "nap", func(ctx *flow.Context, d time.Duration) (flow.Decision, error) {
		if !ctx.Fired("nap") {
			return ctx.Sleep("nap", d), nil
		}
		return ctx.Complete("rested"), nil
	})
	flow.RegisterWorkflow(reg, "hook", func(ctx *flow.Context, token string) (flow.Decision, error) {
		if v := ctx.Hook("cb"); v != nil {
			return ctx.Complete(v), nil
		}
		return ctx.CreateHook("cb", nil, flow.WithToken(token)), nil
	})
	return reg
}

// Steps is a workflow of n sequential steps "s0" ... "s<n-1>", each running step "inc" (Inc,
// registered with it) on the previous one's output, from 0; it completes with n.
func Steps(ctx *flow.Context, n int) (flow.Decision, error) {
	v := 0
	for i := range n {
		id := fmt.Sprintf("s%d", i)
		out, ok, err := flow.Output[int](ctx, id)
		if err != nil || !ok {
			return ctx.ScheduleStep(id, "inc", v), err
		}
		v = out
	}
	return ctx.Complete(v), nil
}

// Inc is the step Steps runs: n+1.
func Inc(_ context.Context, n int) (int, error) { return n + 1, nil }

// Page is one answer of the web UI.
type Page struct {
	Status int
	Header http.Header
	Body   string
}

// Get fetches path from the history service's HTTP listener at base, not following redirects.
func Get(t *testing.T, base, path string) Page {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+base+path, nil)
	require.NoError(t, err)
	return Do(t, req)
}

// Post posts body with contentType and the given Origin ("" sends none). From the service's
// own origin it sends the page's CSRF token, as the page's script does.
func Post(t *testing.T, base, path, contentType, origin, body string) Page {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	if origin != "" {
		req.Header.Set("Origin", origin)
		req.Header.Set("Sec-Fetch-Site", map[bool]string{true: "same-origin", false: "cross-site"}[origin == "http://"+base])
	}
	if origin == "http://"+base {
		req.Header.Set("X-Flow-CSRF", CSRF(t, base)) // as the page's script does
	}
	return Do(t, req)
}

// Do sends req, not following redirects, and returns the answer; it fails the test when no
// answer came within 30 seconds.
func Do(t *testing.T, req *http.Request) Page {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return Page{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

// CSRF returns the CSRF token the web UI's pages carry (for an anonymous caller).
func CSRF(t *testing.T, base string) string {
	t.Helper()
	return CSRFOf(t, Get(t, base, "/ui/").Body)
}

// CSRFOf returns the CSRF token of a page.
func CSRFOf(t *testing.T, body string) string {
	t.Helper()
	m := regexp.MustCompile(`<meta name="flow-csrf" content="([^"]*)">`).FindStringSubmatch(body)
	require.NotNil(t, m, "no CSRF token in:\n%s", body)
	return m[1]
}

// Text returns the text of the first element with id, tags stripped.
func (p Page) Text(t *testing.T, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `"[^>]*>((?s).*?)</`).FindStringSubmatch(p.Body)
	require.NotNil(t, m, "no element #%s in:\n%s", id, p.Body)
	return strings.TrimSpace(m[1])
}
