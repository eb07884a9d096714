package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/natstest"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestServerProbes(t *testing.T) {
	srv := natstest.RunJetStream(t)
	nc := natstest.Connect(t, srv)
	var st health.State
	s, err := health.Listen("127.0.0.1:0", func(context.Context) error {
		return errors.Join(st.Err(), health.NATS(nc))
	}, natstest.Logger())
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Shutdown(context.Background())) }()
	base := "http://" + s.Addr()

	code, body := get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"ok"}`, body)

	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.JSONEq(t, `{"ready":false,"reason":"starting"}`, body)

	st.Started()
	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"ready":true}`, body)

	nc.Close()
	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	var r struct {
		Ready  bool   `json:"ready"`
		Reason string `json:"reason"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	require.False(t, r.Ready)
	require.Equal(t, "NATS connection CLOSED", r.Reason)

	st.Stopping()
	_, body = get(t, base+"/readyz")
	require.Contains(t, body, "stopping")

	code, body = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.Contains(body, "# TYPE go_goroutines gauge"), body)
}

func TestListenOffAndAddresses(t *testing.T) {
	for _, addr := range []string{"", "off"} {
		s, err := health.Listen(addr, nil, natstest.Logger())
		require.NoError(t, err)
		require.Nil(t, s)
		require.Empty(t, s.Addr())
		require.NoError(t, s.Shutdown(context.Background()))
		require.NoError(t, health.CheckAddr(addr))
	}
	require.ErrorContains(t, health.CheckAddr("8422"), `must be host:port or "off"`)
	require.NoError(t, health.CheckAddr("0.0.0.0:8422"))
}

func TestLiveExtra(t *testing.T) {
	rec := httptest.NewRecorder()
	health.Live(func() map[string]any { return map[string]any{"runs": 3} }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"status":"ok","runs":3}`, rec.Body.String())
}
