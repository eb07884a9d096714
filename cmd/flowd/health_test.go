package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHealth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusNoContent)
		case "/slow":
			<-r.Context().Done()
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"ready":false,"reason":"the NATS connection is down"}`))
		}
	}))
	t.Cleanup(srv.Close)

	require.NoError(t, health(t.Context(), []string{srv.URL + "/readyz"}))

	err := health(t.Context(), []string{srv.URL + "/notready"})
	require.ErrorContains(t, err, "503 Service Unavailable")
	require.ErrorContains(t, err, "the NATS connection is down", "the body's reason is shown")

	err = health(t.Context(), []string{srv.URL + "/slow"})
	require.ErrorContains(t, err, "deadline exceeded", "a probe gives up after its timeout")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + ln.Addr().String() + "/readyz"
	require.NoError(t, ln.Close())
	require.ErrorContains(t, health(t.Context(), []string{closed}), "connection refused")

	for _, args := range [][]string{nil, {"a", "b"}, {"127.0.0.1:8420/readyz"}, {"ftp://x/"}} {
		require.ErrorContains(t, health(t.Context(), args), "usage: flowd health URL", "args %q", args)
	}
	require.ErrorContains(t, run([]string{"health"}), "usage: flowd health URL", "run dispatches health")
}
