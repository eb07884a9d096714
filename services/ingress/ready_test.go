package ingress_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/health/healthtest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/services/ingress"
)

// The ingress's probes need no token; readiness follows Start, the NATS connection and Stop,
// while liveness stays 200 as long as the process serves.
func TestProbes(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	nc := natstest.Connect(t, srv)
	in, err := ingress.New(ingress.Config{Conn: nc, HTTPAddr: "127.0.0.1:0", Tokens: []string{"s3cret"}, Logger: quiet})
	require.NoError(t, err)
	require.ErrorContains(t, in.Ready(t.Context()), "starting")
	require.NoError(t, in.Start(t.Context()))
	t.Cleanup(func() { _ = in.Stop() })
	base := "http://" + in.HTTPAddr()
	get := func(path string) (int, string, string) { return healthtest.Get(t, base+path) }

	code, _, body := get("/readyz")
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"ready":true}`, body)
	code, _, body = get("/healthz")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"ok"}`, body)
	code, ct, body := get("/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, ct, "text/plain")
	require.Contains(t, body, "# TYPE go_goroutines gauge")
	resp, err := http.Post(base+"/v1/workflows/order/runs", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the input routes still need the token")

	nc.Close()
	code, _, body = get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	var r struct {
		Ready  bool   `json:"ready"`
		Reason string `json:"reason"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	require.Equal(t, "NATS connection CLOSED", r.Reason)
	code, _, _ = get("/healthz")
	require.Equal(t, http.StatusOK, code, "losing NATS makes the ingress unready, not dead")

	_ = in.Stop() // unsubscribing fails: the connection is closed
	rec := httptest.NewRecorder()
	health.Ready(in.Ready).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.JSONEq(t, `{"ready":false,"reason":"stopping"}`, rec.Body.String())
}
