package history_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
)

// httpCall is one request to the history service's HTTP port.
type httpCall struct {
	method, path, host string
	// token is sent as a bearer token; cookie as the session cookie.
	token, cookie string
	// browser sends the same-origin headers a browser sends (Origin, Sec-Fetch-Site), with
	// csrf as X-Flow-CSRF when set.
	browser bool
	csrf    string
	// contentType and body are the request's body.
	contentType, body string
}

// do sends c to the service at base (host:port), not following redirects.
func (c httpCall) do(t *testing.T, base string) historytest.Page {
	t.Helper()
	if c.method == "" {
		c.method = http.MethodGet
	}
	req, err := http.NewRequest(c.method, "http://"+base+c.path, strings.NewReader(c.body))
	require.NoError(t, err)
	if c.host != "" {
		req.Host = c.host
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "flow_session", Value: c.cookie})
	}
	if c.browser {
		req.Header.Set("Origin", "http://"+base)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	if c.csrf != "" {
		req.Header.Set("X-Flow-CSRF", c.csrf)
	}
	return historytest.Do(t, req)
}

// login signs in to the web UI with token and returns the session cookie's value.
func login(t *testing.T, base, token string) string {
	t.Helper()
	p := httpCall{method: http.MethodPost, path: "/ui/login", browser: true, contentType: "application/x-www-form-urlencoded",
		body: url.Values{"token": {token}, "next": {"/ui/"}}.Encode()}.do(t, base)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/ui/", p.Header.Get("Location"))
	resp := http.Response{Header: p.Header}
	for _, c := range resp.Cookies() {
		if c.Name == "flow_session" {
			require.True(t, c.HttpOnly, "the session cookie is HttpOnly")
			require.Equal(t, http.SameSiteStrictMode, c.SameSite)
			require.NotContains(t, c.Value, token, "the cookie does not hold the token")
			require.Positive(t, c.MaxAge)
			return c.Value
		}
	}
	t.Fatalf("no session cookie in %v", p.Header)
	return ""
}

// awaitingRun starts the test workflow "await" and waits until it waits for its signal "go".
func awaitingRun(t *testing.T, ctx context.Context, client *flow.Client, runID string) {
	t.Helper()
	_, err := client.Start(ctx, "await", nil, &flow.StartOptions{RunID: runID})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s, err := client.Snapshot(ctx, runID)
		return err == nil && len(s.SignalWaits) == 1
	}, 20*time.Second, 5*time.Millisecond, "run %s waits for its signal", runID)
}

// TestHTTPAuth: with tokens configured, the history service's API and web UI refuse callers
// without a token or session (it once had no authentication at all), a read-only token
// reads but cannot act or see secrets, the UI's sign-in sets a session cookie that does not
// hold the token, its POSTs need the page's CSRF token, and its actions reach the ingress with
// the caller's own token (a token the ingress does not accept is refused there).
func TestHTTPAuth(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h := startHistoryWith(t, srv, history.Config{Tokens: []string{"full-token", "history-only-token"}, ReadTokens: []string{"read-token"}},
		ingress.Config{Tokens: []string{"full-token"}})
	startWorker(t, srv, registry(""))
	client := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	base := h.HTTPAddr()
	runID := "auth-await"
	awaitingRun(t, ctx, client, runID)

	t.Run("Unauthenticated", func(t *testing.T) {
		for _, path := range []string{"/v1/runs", "/v1/runs/" + runID, "/v1/runs/" + runID + "/history", "/v1/runs/" + runID + "/watch", "/v1/definitions"} {
			p := httpCall{path: path}.do(t, base)
			require.Equal(t, http.StatusUnauthorized, p.Status, path)
			require.Contains(t, p.Header.Get("WWW-Authenticate"), "Bearer", path)
			require.Contains(t, p.Body, "needs a bearer token", path)
			p = httpCall{path: path, token: "wrong-token"}.do(t, base)
			require.Equal(t, http.StatusUnauthorized, p.Status, path)
		}
		for _, path := range []string{"/", "/ui/", "/ui/runs/" + runID, "/ui/schedules", "/ui/batches"} {
			p := httpCall{path: path}.do(t, base)
			require.Equal(t, http.StatusSeeOther, p.Status, path)
			require.True(t, strings.HasPrefix(p.Header.Get("Location"), "/ui/login?next="), p.Header.Get("Location"))
		}
		for _, path := range []string{"/healthz", "/readyz", "/ui/login", "/ui/static/ui.js"} {
			require.Equal(t, http.StatusOK, httpCall{path: path}.do(t, base).Status, path)
		}
		// A form POST from curl: no token, no session, no CSRF token.
		for _, action := range []string{"signal", "cancel", "pause", "unpause"} {
			p := httpCall{method: http.MethodPost, path: "/ui/runs/" + runID + "/" + action, contentType: "application/x-www-form-urlencoded", body: "name=go&reason=curl"}.do(t, base)
			require.Equal(t, http.StatusUnauthorized, p.Status, action)
		}
		p := httpCall{method: http.MethodPost, path: "/v1/runs/" + runID + "/resume"}.do(t, base)
		require.Equal(t, http.StatusUnauthorized, p.Status)
	})

	t.Run("ReadOnly", func(t *testing.T) {
		for _, path := range []string{"/v1/runs", "/v1/runs/" + runID, "/v1/runs/" + runID + "/history", "/ui/", "/ui/runs/" + runID} {
			p := httpCall{path: path, token: "read-token"}.do(t, base)
			require.Equal(t, http.StatusOK, p.Status, path)
		}
		p := httpCall{path: "/v1/runs/" + runID + "?reveal=secrets", token: "read-token"}.do(t, base)
		require.Equal(t, http.StatusForbidden, p.Status)
		p = httpCall{method: http.MethodPost, path: "/v1/runs/" + runID + "/resume", token: "read-token"}.do(t, base)
		require.Equal(t, http.StatusForbidden, p.Status)
		require.Contains(t, p.Body, "read-only")
		p = httpCall{method: http.MethodPost, path: "/ui/runs/" + runID + "/signal", token: "read-token", contentType: "application/json", body: `{"name":"go"}`}.do(t, base)
		require.Equal(t, http.StatusForbidden, p.Status)

		session := login(t, base, "read-token")
		page := httpCall{path: "/ui/runs/" + runID, cookie: session}.do(t, base)
		require.Equal(t, http.StatusOK, page.Status)
		require.Contains(t, page.Body, `id="signout"`)
		p = httpCall{method: http.MethodPost, path: "/ui/runs/" + runID + "/signal", cookie: session, browser: true, csrf: historytest.CSRFOf(t, page.Body),
			contentType: "application/json", body: `{"name":"go"}`}.do(t, base)
		require.Equal(t, http.StatusForbidden, p.Status, p.Body)
		s, err := client.Snapshot(ctx, runID)
		require.NoError(t, err)
		require.Empty(t, s.Signals, "the read-only token's signal was not sent")
	})

	t.Run("SignIn", func(t *testing.T) {
		p := httpCall{method: http.MethodPost, path: "/ui/login", browser: true, contentType: "application/x-www-form-urlencoded", body: "token=nope"}.do(t, base)
		require.Equal(t, http.StatusUnauthorized, p.Status)
		require.Contains(t, p.Body, "not accepted")
		p = httpCall{method: http.MethodPost, path: "/ui/login", contentType: "application/x-www-form-urlencoded", body: "token=full-token"}.do(t, base)
		require.Equal(t, http.StatusSeeOther, p.Status, "a sign-in without browser headers (curl) works")
		req, _ := http.NewRequest(http.MethodPost, "http://"+base+"/ui/login", strings.NewReader("token=full-token"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		resp, err := http.DefaultTransport.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "a cross-site sign-in is refused")

		session := login(t, base, "full-token")
		require.Equal(t, http.StatusOK, httpCall{path: "/v1/runs/" + runID, cookie: session}.do(t, base).Status, "the session reads the API too (the page's script)")
		p = httpCall{method: http.MethodPost, path: "/ui/logout", cookie: session, browser: true}.do(t, base)
		require.Equal(t, http.StatusSeeOther, p.Status)
		require.Contains(t, p.Header.Get("Set-Cookie"), "Max-Age=0")
		p = httpCall{path: "/ui/login?next=//evil.example/"}.do(t, base)
		require.Contains(t, p.Body, `name="next" value="/ui/"`, "the sign-in redirects only within the service")
	})

	t.Run("ActionsThroughIngress", func(t *testing.T) {
		// A token the history service accepts but the ingress does not: the ingress refuses it.
		session := login(t, base, "history-only-token")
		page := httpCall{path: "/ui/runs/" + runID, cookie: session}.do(t, base)
		require.Equal(t, http.StatusOK, page.Status)
		csrf := historytest.CSRFOf(t, page.Body)
		require.NotEmpty(t, csrf)
		p := httpCall{method: http.MethodPost, path: "/ui/runs/" + runID + "/signal", cookie: session, browser: true, csrf: csrf,
			contentType: "application/json", body: `{"name":"go","payload":1}`}.do(t, base)
		require.Equal(t, http.StatusUnauthorized, p.Status, p.Body)
		require.Contains(t, p.Body, `"code": "unauthorized"`, "the ingress's refusal")

		session = login(t, base, "full-token")
		page = httpCall{path: "/ui/runs/" + runID, cookie: session}.do(t, base)
		csrf = historytest.CSRFOf(t, page.Body)
		// The session alone is not enough: the page's CSRF token must come with it.
		p = httpCall{method: http.MethodPost, path: "/ui/runs/" + runID + "/signal", cookie: session, browser: true,
			contentType: "application/json", body: `{"name":"go","payload":1}`}.do(t, base)
		require.Equal(t, http.StatusForbidden, p.Status, p.Body)
		require.Contains(t, p.Body, "CSRF")
		p = httpCall{method: http.MethodPost, path: "/ui/runs/" + runID + "/signal", cookie: session, browser: true, contentType: "application/x-www-form-urlencoded",
			body: url.Values{"name": {"go"}, "payload": {`{"note":"ui"}`}, "csrf": {csrf}}.Encode()}.do(t, base)
		require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
		require.Contains(t, p.Header.Get("Location"), "notice=sent")
		var out map[string]string
		require.NoError(t, client.Result(ctx, runID, &out))
		require.Equal(t, map[string]string{"note": "ui"}, out)

		other := "auth-await-cancel"
		awaitingRun(t, ctx, client, other)
		p = httpCall{method: http.MethodPost, path: "/ui/runs/" + other + "/cancel", token: "full-token",
			contentType: "application/json", body: `{"reason":"by bearer"}`}.do(t, base)
		require.Equal(t, http.StatusOK, p.Status, p.Body)
		var runErr *flow.RunError
		require.ErrorAs(t, client.Result(ctx, other, nil), &runErr)
		require.Equal(t, flow.StatusCancelled, runErr.Status)
	})
}

// TestHTTPHost: the HTTP port answers only for its own host names (it once served any Host
// header, so a page whose DNS name was rebound to this address could read the API).
func TestHTTPHost(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h := startHistoryWith(t, srv, history.Config{AllowedHosts: []string{"flow-history"}}, ingress.Config{})
	base := h.HTTPAddr()
	for _, path := range []string{"/v1/runs", "/ui/", "/v1/definitions"} {
		p := httpCall{path: path, host: "rebound.evil.example:8420"}.do(t, base)
		require.Equal(t, http.StatusMisdirectedRequest, p.Status, path)
		require.Contains(t, p.Body, "FLOW_HISTORY_ALLOWED_HOSTS")
		for _, host := range []string{"localhost:8420", "127.0.0.1", "[::1]:8420", "flow-history:8420", "FLOW-HISTORY", base} {
			require.NotEqual(t, http.StatusMisdirectedRequest, httpCall{path: path, host: host}.do(t, base).Status, host)
		}
	}
	p := httpCall{method: http.MethodPost, path: "/ui/runs/x/cancel", host: "rebound.evil.example", contentType: "application/json", body: "{}"}.do(t, base)
	require.Equal(t, http.StatusMisdirectedRequest, p.Status)
	require.Equal(t, http.StatusOK, httpCall{path: "/healthz", host: "10.1.2.3:8420"}.do(t, base).Status, "probes answer any host")
}

// TestSecretsRedacted: a run's hook tokens and seed are not served to readers (the run page
// once showed a hook token ten times, /v1/runs/{id} and the NATS queries served tokens and the
// seed), neither in the fields recording them nor where the workflow copied them (the
// webhook example's step input and output); a full token reveals them on request, a read-only
// one cannot, and the NATS secrets endpoint (granted to no role) reveals them. The redacted
// history still holds every invariant (flow verify).
func TestSecretsRedacted(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h := startHistoryWith(t, srv, history.Config{Tokens: []string{"full-token"}, ReadTokens: []string{"read-token"}}, ingress.Config{Tokens: []string{"full-token"}})
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	examples.RegisterWith(reg, examples.Options{Logger: quiet})
	startWorker(t, srv, reg)
	nc := natstest.Connect(t, srv)
	client, err := flow.NewClient(t.Context(), nc, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	base := h.HTTPAddr()
	runID, err := client.Start(ctx, "webhook", nil, &flow.StartOptions{RunID: "secret-hook"})
	require.NoError(t, err)
	var token string
	require.Eventually(t, func() bool {
		s, err := client.Secrets().Snapshot(ctx, runID)
		if err != nil || s.Hooks[examples.WebhookHook] == nil || len(s.Steps) == 0 || !s.Steps["announce-hook"].Status.Settled() {
			return false
		}
		token = s.Hooks[examples.WebhookHook].Token
		return true
	}, 30*time.Second, 10*time.Millisecond, "the webhook run created and announced its hook")
	require.Len(t, token, 32)
	revealed := httpCall{path: "/v1/runs/" + runID + "/history?reveal=secrets", token: "full-token"}.do(t, base)
	require.Equal(t, http.StatusOK, revealed.Status, revealed.Body)
	var hist api.HistoryResponse
	require.NoError(t, json.Unmarshal([]byte(revealed.Body), &hist))
	seed := hist.Events[0].Payload.(*event.RunStarted).Seed
	require.NotEqual(t, api.Redacted, seed)
	require.Contains(t, revealed.Body, token)

	hidden := func(t *testing.T, what, body string) {
		t.Helper()
		require.NotContains(t, body, token, "%s shows the hook token", what)
		require.NotContains(t, body, seed, "%s shows the seed", what)
	}
	t.Run("HTTP", func(t *testing.T) {
		for _, tok := range []string{"full-token", "read-token"} {
			for _, path := range []string{"/v1/runs/" + runID, "/v1/runs/" + runID + "/history", "/v1/runs/" + runID + "/history?after=3",
				"/ui/runs/" + runID, "/ui/runs/" + runID + "?at=3", "/ui/runs/" + runID + "?fragment=view"} {
				p := httpCall{path: path, token: tok}.do(t, base)
				require.Equal(t, http.StatusOK, p.Status, path)
				hidden(t, path, p.Body)
			}
			p := httpCall{path: "/v1/runs/" + runID, token: tok}.do(t, base)
			require.Contains(t, p.Body, `"token": "redacted:callback"`)
			p = httpCall{path: "/ui/runs/" + runID, token: tok}.do(t, base)
			require.Contains(t, p.Body, `id="reveal-secrets"`, "the run page offers to show the tokens")
		}
		for _, path := range []string{"/v1/runs/" + runID, "/ui/runs/" + runID} {
			p := httpCall{path: path + "?reveal=secrets", token: "full-token"}.do(t, base)
			require.Equal(t, http.StatusOK, p.Status, path)
			require.Contains(t, p.Body, token, path)
			p = httpCall{path: path + "?reveal=secrets", token: "read-token"}.do(t, base)
			require.Equal(t, http.StatusForbidden, p.Status, path)
			hidden(t, path, p.Body)
		}
	})

	t.Run("NATS", func(t *testing.T) {
		for subject, req := range map[string]any{
			api.SubjectGet:     api.GetRequest{RunID: runID},
			api.SubjectHistory: api.HistoryRequest{RunID: runID},
		} {
			b, err := json.Marshal(req)
			require.NoError(t, err)
			msg, err := nc.RequestWithContext(ctx, subject, b)
			require.NoError(t, err)
			require.Empty(t, msg.Header.Get("Nats-Service-Error"), subject)
			hidden(t, subject, string(msg.Data))
			require.Contains(t, string(msg.Data), "redacted", subject)
		}
		s, err := client.Snapshot(ctx, runID)
		require.NoError(t, err)
		require.Equal(t, "redacted:callback", s.Hooks[examples.WebhookHook].Token)
		got, err := client.Secrets().HookToken(ctx, runID, examples.WebhookHook)
		require.NoError(t, err)
		require.Equal(t, token, got)
		all, err := client.History(ctx, runID, 0)
		require.NoError(t, err)
		require.Empty(t, core.Check(runID, all), "a redacted history holds the invariants (flow verify)")
	})

	t.Run("Watch", func(t *testing.T) {
		_, err := client.DeliverHook(ctx, token, map[string]string{"paid": "yes"}, nil)
		require.NoError(t, err)
		require.NoError(t, client.Result(ctx, runID, nil))
		p := httpCall{path: "/v1/runs/" + runID + "/watch", token: "read-token"}.do(t, base)
		require.Equal(t, http.StatusOK, p.Status)
		require.Contains(t, p.Body, "run.completed")
		hidden(t, "watch", p.Body)
	})
}

// TestUIActionsOff: with FLOW_HISTORY_INGRESS_URL=off the run page offers no actions and says
// why, and an action posted anyway is refused with that message.
func TestUIActionsOff(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h, client := startEnv(t, srv, history.Config{HTTPAddr: "127.0.0.1:0", IngressURL: "off"}, registry(""))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	awaitingRun(t, ctx, client, "off-await")
	base := h.HTTPAddr()
	p := historytest.Get(t, base, "/ui/runs/off-await")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Text(t, "actions-off"), "FLOW_HISTORY_INGRESS_URL")
	require.Regexp(t, `id="actions" hidden`, p.Body)
	p = historytest.Post(t, base, "/ui/runs/off-await/signal", "application/json", "http://"+base, `{"name":"go"}`)
	require.Equal(t, http.StatusServiceUnavailable, p.Status)
	require.Contains(t, p.Body, "FLOW_HISTORY_INGRESS_URL")
}
