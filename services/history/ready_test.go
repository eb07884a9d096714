package history_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/health/healthtest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/services/history"
)

// The history service's probes: /healthz as before (status, runs, applied), /readyz 200 once
// Start has finished and 503 from the moment Stop begins, /metrics in the Prometheus format.
func TestProbesFollowStartAndStop(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "127.0.0.1:0", Logger: quiet})
	require.NoError(t, err)
	require.ErrorContains(t, h.Ready(t.Context()), "starting")
	require.NoError(t, h.Start(t.Context()))
	base := "http://" + h.HTTPAddr()
	get := func(path string) (int, string, string) { return healthtest.Get(t, base+path) }

	code, _, body := get("/healthz")
	require.Equal(t, http.StatusOK, code)
	var live map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &live))
	require.Equal(t, "ok", live["status"])
	require.Contains(t, live, "runs")
	require.Contains(t, live, "applied")

	code, _, body = get("/readyz")
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"ready":true}`, body)

	code, ct, body := get("/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, ct, "text/plain")
	require.Contains(t, body, "# TYPE go_goroutines gauge")

	require.NoError(t, h.Stop())
	require.ErrorContains(t, h.Ready(t.Context()), "stopping")
	rec := httptest.NewRecorder()
	health.Ready(h.Ready).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.JSONEq(t, `{"ready":false,"reason":"stopping"}`, rec.Body.String())
}
