package ingress_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/worker"
)

func TestQueryRoutes(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { _ = h.Stop() })
	in, err := ingress.New(ingress.Config{Conn: natstest.Connect(t, srv), Logger: quiet, HTTPAddr: "127.0.0.1:0", Tokens: []string{token}})
	require.NoError(t, err)
	require.NoError(t, in.Start(t.Context()))
	t.Cleanup(func() { _ = in.Stop() })
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "gate", gate)
	flow.RegisterQuery(reg, "gate", "greet", func(ctx *flow.Context, who struct {
		Name string `json:"name"`
	}) (string, error) {
		return "hello " + who.Name + ", the run is " + string(ctx.Snapshot().Status), nil
	})
	flow.RegisterQuery(reg, "gate", "boom", func(*flow.Context, struct{}) (int, error) { panic("kaboom") })
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	c, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	runID, err := c.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "gate-q"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s, err := c.Snapshot(ctx, runID)
		return err == nil && s.SignalWaits["go"] != nil
	}, 20*time.Second, 5*time.Millisecond)

	base := "http://" + in.HTTPAddr() + "/v1/runs/"
	do := func(t *testing.T, method, path, body, auth string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		if method == http.MethodPost {
			req.Header.Set("Content-Type", "application/json")
		}
		if auth == "" {
			auth = "Bearer " + token
		}
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}
	for _, tt := range []struct {
		name, method, path, body, auth string
		status                         int
		want                           string
	}{
		{"GetWithArgs", "GET", "gate-q/queries/greet?args=" + url.QueryEscape(`{"name":"ann"}`), "", "", 200, `"hello ann, the run is suspended"`},
		{"PostWithBody", "POST", "gate-q/queries/greet", `{"name":"bob"}`, "", 200, `"hello bob, the run is suspended"`},
		{"GetWithoutArgs", "GET", "gate-q/queries/greet", "", "", 200, `"hello , the run is suspended"`},
		{"UnknownQuery", "GET", "gate-q/queries/eta", "", "", 404, `unknown_query`},
		{"BadArgs", "GET", "gate-q/queries/greet?args=" + url.QueryEscape(`{"name":1}`), "", "", 400, `invalid_args`},
		{"ArgsNotJSON", "GET", "gate-q/queries/greet?args=" + url.QueryEscape(`{name`), "", "", 400, `invalid_args`},
		{"HandlerPanics", "POST", "gate-q/queries/boom", "", "", 422, `kaboom`},
		{"UnknownRun", "GET", "nope/queries/greet", "", "", 404, `run_not_found`},
		{"NoToken", "GET", "gate-q/queries/greet", "", "Bearer wrong", 401, `unauthorized`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body := do(t, tt.method, tt.path, tt.body, tt.auth)
			require.Equal(t, tt.status, status, "%s", body)
			if status != 200 {
				require.Contains(t, string(body), tt.want)
				return
			}
			var res api.QueryResult
			require.NoError(t, json.Unmarshal(body, &res))
			require.JSONEq(t, tt.want, string(res.Result))
			require.Equal(t, api.QueryResult{RunID: "gate-q", Query: res.Query, Result: res.Result, Seq: res.Seq, Status: flow.StatusSuspended}, res)
		})
	}
	t.Run("UnknownQueryListsTheKnown", func(t *testing.T) {
		_, body := do(t, "GET", "gate-q/queries/eta", "", "")
		var qe api.QueryError
		require.NoError(t, json.Unmarshal(body, &qe))
		require.Equal(t, []string{"boom", "greet"}, qe.Queries)
		require.Contains(t, qe.Message, `has no query "eta"; it handles boom, greet`)
	})
}
