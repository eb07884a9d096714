package main

import (
	"bytes"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/syncbuf"
)

// A service started before the history service waits, saying for what, and starts once the
// streams exist.
func TestAwaitStreams(t *testing.T) {
	srv := natstest.RunServer(t, &server.Options{JetStream: true}) // no Flow streams
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	done := make(chan error, 1)
	go func() {
		done <- awaitStreams(t.Context(), natsconn.Config{URL: srv.ClientURL()}, "worker", addr, logger)
	}()

	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Contains([]byte(logs.String()), []byte("FLOW_HISTORY")) {
		require.True(t, time.Now().Before(deadline), "no log says what is missing: %s", logs.String())
		select {
		case err := <-done:
			t.Fatalf("awaitStreams returned before the streams exist: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.Contains(t, logs.String(), "start `flowd history`")
	// Meanwhile the probes say the process is live and what it waits for.
	require.NoError(t, health(t.Context(), []string{"http://" + addr + "/healthz"}))
	err = health(t.Context(), []string{"http://" + addr + "/readyz"})
	require.ErrorContains(t, err, "503")
	require.ErrorContains(t, err, "FLOW_HISTORY")

	js := jetStreamOf(t, srv)
	require.NoError(t, streams.Ensure(t.Context(), js, streams.Config{}))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2*provisionInterval + 10*time.Second):
		t.Fatal("awaitStreams did not return once the streams existed")
	}
}

// The history service provisions the streams; a configuration no server accepts is an error at
// once rather than a retry.
func TestProvisionStreams(t *testing.T) {
	srv := natstest.RunServer(t, &server.Options{JetStream: true}) // no Flow streams
	cfg, logger := natsconn.Config{URL: srv.ClientURL()}, natstest.Logger()
	require.ErrorIs(t, provisionStreams(t.Context(), cfg, streams.Config{Replicas: 9}, "off", logger), streams.ErrConfig)
	require.NoError(t, provisionStreams(t.Context(), cfg, streams.Config{}, "off", logger))
	js := jetStreamOf(t, srv)
	missing, err := streams.Missing(t.Context(), js)
	require.NoError(t, err)
	require.Empty(t, missing)
}

// jetStreamOf returns a JetStream context on a new connection to srv, closed on cleanup.
func jetStreamOf(t *testing.T, srv *server.Server) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}
