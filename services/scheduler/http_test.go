package scheduler_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/health/healthtest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/services/scheduler"
)

// The scheduler's readiness: not before Start has finished, ready (as leader or standby) while
// it runs, not ready from the moment Stop begins; its listener closes with it.
func TestProbesFollowStartAndStop(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "127.0.0.1:0", Logger: natstest.Logger()})
	require.NoError(t, err)
	require.ErrorContains(t, s.Ready(t.Context()), "starting")
	require.Empty(t, s.HTTPAddr())
	require.NoError(t, s.Start(t.Context()))
	base := "http://" + s.HTTPAddr()

	code, _, body := healthtest.Get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"ready":true}`, body)
	code, _, body = healthtest.Get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"ok"}`, body)
	code, ct, body := healthtest.Get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, ct, "text/plain")
	require.Contains(t, body, "# TYPE go_goroutines gauge")

	// A standby is ready too: the zero HTTPAddr serves nothing, so two share a process.
	standby, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: natstest.Logger()})
	require.NoError(t, err)
	require.NoError(t, standby.Start(t.Context()))
	require.Empty(t, standby.HTTPAddr())
	require.NoError(t, standby.Ready(t.Context()))
	require.NoError(t, standby.Stop())

	require.NoError(t, s.Stop())
	require.ErrorContains(t, s.Ready(t.Context()), "stopping")
	rec := httptest.NewRecorder()
	health.Ready(s.Ready).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.JSONEq(t, `{"ready":false,"reason":"stopping"}`, rec.Body.String())
	_, err = http.Get(base + "/readyz")
	require.Error(t, err, "the listener is closed once the scheduler stopped")

	_, err = scheduler.New(scheduler.Config{HTTPAddr: "8422"})
	require.ErrorContains(t, err, "FLOW_SCHEDULER_HTTP_ADDR")
}
