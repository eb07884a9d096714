package ingress_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/ingress"
)

// TestCrossSiteRequestsAreRefused: what a web page can make a browser send (no-cors text/plain
// or form POSTs, empty POSTs, requests marked cross-site or from a foreign Origin, requests to a
// rebound host name) changes nothing; servers, curl and SDKs, which send none of those, pass.
func TestCrossSiteRequestsAreRefused(t *testing.T) {
	t.Parallel()
	const console = "https://ops.example.com"
	b := setup(t, ingress.Config{AllowedOrigins: []string{console}})
	ctx := t.Context()
	_, err := b.client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "victim"})
	require.NoError(t, err)
	tok := b.hookToken(t, "victim")
	own := b.base // http://127.0.0.1:port

	for _, tt := range []struct {
		name   string
		req    httpReq
		status int
		code   api.IngressCode
	}{
		{"TextPlainTerminate", httpReq{path: "/v1/runs/victim/terminate", contentType: "text/plain", body: `{"reason":"x"}`}, 415, api.CodeMediaType},
		{"TextPlainEmptyCancel", httpReq{path: "/v1/runs/victim/cancel", contentType: "text/plain"}, 415, api.CodeMediaType},
		{"EmptyCancelWithoutType", httpReq{path: "/v1/runs/victim/cancel"}, 415, api.CodeMediaType},
		{"EmptyTerminateWithoutType", httpReq{path: "/v1/runs/victim/terminate"}, 415, api.CodeMediaType},
		{"FormSignal", httpReq{path: "/v1/runs/victim/signals/go", contentType: "application/x-www-form-urlencoded", body: `a=1`}, 415, api.CodeMediaType},
		{"TextPlainPause", httpReq{path: "/v1/runs/victim/pause", contentType: "text/plain", body: `{}`}, 415, api.CodeMediaType},
		{"TextPlainReset", httpReq{path: "/v1/runs/victim/reset", contentType: "text/plain", body: `{"mode":"rerun"}`}, 415, api.CodeMediaType},
		{"TextPlainBatch", httpReq{path: "/v1/batches", contentType: "text/plain", body: `{"spec":{"op":"cancel","filter":"status = \"running\""}}`}, 415, api.CodeMediaType},
		{"TextPlainSchedule", httpReq{path: "/v1/schedules", contentType: "text/plain", body: `{"name":"s1"}`}, 415, api.CodeMediaType},
		{"TextPlainDefinitionPause", httpReq{path: "/v1/definitions/gate/pause", contentType: "text/plain", body: `{}`}, 415, api.CodeMediaType},
		{"CrossSite", httpReq{path: "/v1/runs/victim/cancel", contentType: "application/json", body: `{}`,
			headers: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}}, 403, api.CodeForbidden},
		{"SameSite", httpReq{path: "/v1/runs/victim/cancel", contentType: "application/json", body: `{}`,
			headers: map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://other.localhost:8000"}}, 403, api.CodeForbidden},
		{"ForeignOriginOldBrowser", httpReq{path: "/v1/runs/victim/terminate", contentType: "application/json", body: `{}`,
			headers: map[string]string{"Origin": "https://evil.example"}}, 403, api.CodeForbidden},
		{"NullOrigin", httpReq{path: "/v1/runs/victim/terminate", contentType: "application/json", body: `{}`,
			headers: map[string]string{"Origin": "null"}}, 403, api.CodeForbidden},
		{"CrossSiteDelete", httpReq{method: http.MethodDelete, path: "/v1/schedules/s1", headers: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403, api.CodeForbidden},
		{"ReboundHost", httpReq{path: "/v1/runs/victim/cancel", contentType: "application/json", body: `{}`,
			headers: map[string]string{"Host": "evil.example:8421", "Sec-Fetch-Site": "same-origin", "Origin": "http://evil.example:8421"}}, 403, api.CodeForbidden},
		{"ReboundHostRead", httpReq{method: http.MethodGet, path: "/v1/pauses", headers: map[string]string{"Host": "evil.example:8421"}}, 403, api.CodeForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lastSeq, victim := b.historyState(t, "victim")
			status, e := b.do(t, tt.req)
			require.Equal(t, tt.status, status, "%s", e.Message)
			require.Equal(t, tt.code, e.Code, "%s", e.Message)
			after, victimAfter := b.historyState(t, "victim")
			require.Equal(t, lastSeq, after, "nothing appended to any run")
			require.Equal(t, victim, victimAfter)
		})
	}

	t.Run("RefusalsSayWhatToDo", func(t *testing.T) {
		_, e := b.do(t, httpReq{path: "/v1/runs/victim/cancel"})
		require.Contains(t, e.Message, "Content-Type: application/json")
		_, e = b.do(t, httpReq{path: "/v1/runs/victim/cancel", contentType: "application/json", headers: map[string]string{"Sec-Fetch-Site": "cross-site"}})
		require.Contains(t, e.Message, "FLOW_INGRESS_ALLOWED_ORIGINS")
	})

	// What passes: a same-origin page, an allowed origin, a browser's own navigation (none),
	// header-less clients, and hook deliveries from anywhere (the token is the secret).
	for _, tt := range []struct {
		name string
		req  httpReq
	}{
		{"SameOrigin", httpReq{path: "/v1/runs/victim/pause", contentType: "application/json", headers: map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": own}}},
		{"OwnOriginOldBrowser", httpReq{path: "/v1/runs/victim/unpause", contentType: "application/json", headers: map[string]string{"Origin": own}}},
		{"AllowedOrigin", httpReq{path: "/v1/runs/victim/pause", contentType: "application/json", body: `{"reason":"ops"}`,
			headers: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": console}}},
		{"NoBrowserHeaders", httpReq{path: "/v1/runs/victim/unpause", contentType: "application/json; charset=utf-8", body: `{}`}},
		{"LocalhostName", httpReq{path: "/v1/runs/victim/signals/other", contentType: "application/json", body: `1`, headers: map[string]string{"Host": "localhost"}}},
		{"DeleteWithoutBody", httpReq{method: http.MethodDelete, path: "/v1/schedules/nope"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, e := b.do(t, tt.req)
			require.NotEqual(t, http.StatusForbidden, status, "%s", e.Message)
			require.NotEqual(t, http.StatusUnsupportedMediaType, status, "%s", e.Message)
			require.Less(t, status, 500, "%s", e.Message)
		})
	}
	t.Run("HookFromAnotherSite", func(t *testing.T) {
		status, e := b.do(t, httpReq{path: "/v1/hooks/" + tok, contentType: "application/json", body: `"from a page"`,
			headers: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://psp.example"}})
		require.Equal(t, http.StatusAccepted, status, "%s", e.Message)
		var out string
		require.NoError(t, b.client.Result(ctx, "victim", &out))
		require.Equal(t, "from a page", out)
	})
}

// TestHostIsNotCheckedWithTokens: behind bearer tokens a rebound name gains nothing (the page
// has no token), and a proxy may use any name.
func TestHostIsNotCheckedWithTokens(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{Tokens: []string{token}})
	status, e := b.do(t, httpReq{method: http.MethodGet, path: "/v1/pauses", auth: "Bearer " + token, headers: map[string]string{"Host": "flow.example.com"}})
	require.Equal(t, http.StatusOK, status, "%s", e.Message)
}

// TestUnauthorizedClosesTheConnection: a client without a good token keeps no connection open.
func TestUnauthorizedClosesTheConnection(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{Tokens: []string{token}})
	c, err := net.Dial("tcp", b.in.HTTPAddr())
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "POST /v1/runs/x/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	rd := bufio.NewReader(c)
	resp, err := http.ReadResponse(rd, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.True(t, resp.Close, "the answer says Connection: close")
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = rd.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the server closed the connection")
}

// TestSmallerFindings covers malformed and foreign requests (invalid UTF-8 at every door, an
// unknown spec version, a name that is not a key, a batch body over the limit, a hook posted
// from another site, ...), each refused with a 4xx that says what was wrong, nothing appended.
func TestSmallerFindings(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{MaxBodyBytes: 4096})
	ctx := t.Context()
	_, err := b.client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "r1"})
	require.NoError(t, err)
	b.hookToken(t, "r1")
	unchanged := func(t *testing.T, fn func()) {
		t.Helper()
		lastSeq, before := b.historyState(t, "r1")
		fn()
		after, bytesAfter := b.historyState(t, "r1")
		require.Equal(t, lastSeq, after, "nothing appended")
		require.Equal(t, before, bytesAfter)
	}

	t.Run("InvalidUTF8OverHTTP", func(t *testing.T) {
		for _, body := range []string{"\"caf\xe9\"", "{\"a\":\"\xff\xfe\"}"} {
			unchanged(t, func() {
				status, e := b.do(t, httpReq{path: "/v1/runs/r1/signals/other", contentType: "application/json", body: body})
				require.Equal(t, http.StatusBadRequest, status, "%s", e.Message)
				require.Equal(t, api.CodeInvalidJSON, e.Code)
				require.Contains(t, e.Message, "UTF-8")
			})
		}
		unchanged(t, func() {
			status, e := b.do(t, httpReq{path: "/v1/runs/r1/signals/other", contentType: "application/cloudevents+json",
				body: "{\"specversion\":\"1.0\",\"id\":\"u1\",\"source\":\"s\",\"type\":\"t\",\"datacontenttype\":\"application/json\",\"data\":\"\xff\"}"})
			require.Equal(t, http.StatusBadRequest, status, "%s", e.Message)
		})
	})

	t.Run("InvalidUTF8OverNATS", func(t *testing.T) {
		for _, h := range []nats.Header{{}, {"ce-specversion": {"1.0"}, "ce-id": {"u2"}, "ce-source": {"s"}, "ce-type": {"t"}, "ce-datacontenttype": {"application/json"}}} {
			unchanged(t, func() {
				reply, err := b.nc.RequestMsg(&nats.Msg{Subject: api.SignalSubject("r1", "other"), Header: h, Data: []byte("\"\xc3\x28\"")}, 10*time.Second)
				require.NoError(t, err)
				require.Equal(t, string(api.CodeInvalidJSON), reply.Header.Get(api.HeaderErrorCode), "%s", reply.Data)
			})
		}
	})

	t.Run("InvalidUTF8OverNATSToEveryDoor", func(t *testing.T) {
		for _, subject := range []string{api.SubjectResetPrefix + "r1", api.SubjectSchedulePrefix + api.ScheduleOpCreate,
			api.SubjectPausesPrefix + "pause.queue.q1", api.SubjectBatchCreate, api.CancelSubject("r1")} {
			unchanged(t, func() {
				reply, err := b.nc.Request(subject, []byte("{\"reason\":\"\xff\"}"), 10*time.Second)
				require.NoError(t, err)
				require.Contains(t, string(reply.Data), "UTF-8", subject)
				require.Contains(t, string(reply.Data), string(api.CodeInvalidJSON), subject)
			})
		}
	})

	t.Run("UnknownSpecVersion", func(t *testing.T) {
		ceHeaders := map[string]string{"ce-specversion": "2.0", "ce-id": "sv-1", "ce-source": "s", "ce-type": "t"}
		unchanged(t, func() {
			status, e := b.do(t, httpReq{path: "/v1/runs/r1/signals/other", contentType: "application/json", body: `1`, headers: ceHeaders})
			require.Equal(t, http.StatusBadRequest, status, "%s", e.Message)
			require.Equal(t, api.CodeInvalidEvent, e.Code)
			require.Contains(t, e.Message, `"2.0"`)
			require.Contains(t, e.Message, "1.0")
		})
		unchanged(t, func() {
			status, e := b.do(t, httpReq{path: "/v1/runs/r1/signals/other", contentType: "application/cloudevents+json",
				body: `{"specversion":"0.9","id":"sv-2","source":"s","type":"t","data":1}`})
			require.Equal(t, http.StatusBadRequest, status, "%s", e.Message)
			require.Equal(t, api.CodeInvalidEvent, e.Code)
		})
		for _, m := range []*nats.Msg{
			{Subject: api.SignalSubject("r1", "other"), Header: nats.Header{"ce-specversion": {"2.0"}, "ce-id": {"sv-3"}, "ce-source": {"s"}, "ce-type": {"t"}}, Data: []byte(`1`)},
			{Subject: api.SignalSubject("r1", "other"), Header: nats.Header{}, Data: []byte(`{"specversion":"2.0","id":"sv-4","source":"s","type":"t","data":1}`)},
		} {
			unchanged(t, func() {
				reply, err := b.nc.RequestMsg(m, 10*time.Second)
				require.NoError(t, err)
				require.Equal(t, string(api.CodeInvalidEvent), reply.Header.Get(api.HeaderErrorCode), "%s", reply.Data)
			})
		}
	})

	t.Run("NameThatIsNotAKey", func(t *testing.T) {
		for _, path := range []string{"/v1/definitions/caf%C3%A9/pause", "/v1/definitions/a:b/unpause", "/v1/queues/%E6%97%A5%E6%9C%AC/pause"} {
			status, e := b.do(t, httpReq{path: path, contentType: "application/json"})
			require.Equal(t, http.StatusBadRequest, status, "%s: %s", path, e.Message)
			require.Equal(t, api.CodeInvalidName, e.Code)
			require.Contains(t, e.Message, "letters a-z and A-Z, digits, '-', '_', '/' and '='")
			require.NotContains(t, e.Message, "nats:")
		}
		reply, err := b.nc.Request(api.SubjectPausesPrefix+"pause.definition.café", nil, 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, string(api.CodeInvalidName), reply.Header.Get(api.HeaderErrorCode), "%s", reply.Data)
	})

	t.Run("LargeBatchBody", func(t *testing.T) {
		status, e := b.do(t, httpReq{path: "/v1/batches", contentType: "application/json", body: `{"id":"` + strings.Repeat("x", 8192) + `"}`})
		require.Equal(t, http.StatusRequestEntityTooLarge, status, "%s", e.Message)
		require.Equal(t, api.CodeTooLarge, e.Code)
	})

	t.Run("NonASCIIInMessages", func(t *testing.T) {
		for _, tt := range []struct{ path, body, want string }{
			{"/v1/workflows/gate/runs", `{"run_id":"日本"}`, `run ID "日本" has '日' at position 0`},
			{"/v1/workflows/gate/runs", `{"run_id":"café"}`, `run ID "café" has 'é' at position 3`},
			{"/v1/runs/r1/signals/%E6%97%A5%E6%9C%AC*", `1`, `signal name "日本*" has '*' at position 2`},
		} {
			status, e := b.do(t, httpReq{path: tt.path, contentType: "application/json", body: tt.body})
			require.Equal(t, http.StatusBadRequest, status, "%s", e.Message)
			require.Contains(t, e.Message, tt.want)
		}
	})

	t.Run("MalformedUpdateNamesTheUpdate", func(t *testing.T) {
		status, e := b.do(t, httpReq{path: "/v1/runs/r1/updates/approve", contentType: "application/json", body: `{"a":`})
		require.Equal(t, http.StatusBadRequest, status, "%s", e.Message)
		require.Contains(t, e.Message, `update "approve"`)
		require.NotContains(t, e.Message, "workflow input")
	})
}

// TestOpenAPIListsEveryRoute: each route the ingress serves is in its OpenAPI document, with
// its method.
func TestOpenAPIListsEveryRoute(t *testing.T) {
	t.Parallel()
	in, err := ingress.New(ingress.Config{})
	require.NoError(t, err)
	raw, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	patterns := ingress.RoutePatterns(in)
	require.Greater(t, len(patterns), 30)
	for _, p := range patterns {
		method, path, ok := strings.Cut(p, " ")
		require.True(t, ok, "route %q names its method", p)
		require.Contains(t, doc.Paths, path, "openapi.json describes %s", p)
		require.Contains(t, doc.Paths[path], strings.ToLower(method), "openapi.json describes %s", p)
	}
	for _, p := range []string{"POST /v1/batches", "GET /v1/batches", "GET /v1/batches/{id}", "POST /v1/batches/{id}/stop"} {
		require.Contains(t, patterns, p)
	}
}
