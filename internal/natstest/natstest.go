// Package natstest runs a real embedded nats-server with JetStream for tests: store on
// t.TempDir(), a free port, shut down on cleanup. Tests never mock NATS.
package natstest

import (
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natsserver"
)

// RunJetStream starts a server for the test, with Flow's streams and buckets created.
func RunJetStream(t testing.TB) *natsserver.Server {
	t.Helper()
	return RunJetStreamWith(t, streams.Config{})
}

// RunJetStreamWith is RunJetStream with Flow's streams created as cfg says (a partitioned
// history: cfg.Partitions).
func RunJetStreamWith(t testing.TB, cfg streams.Config) *natsserver.Server {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{Dir: t.TempDir(), Port: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc := Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	if err := streams.Ensure(t.Context(), js, cfg); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return srv
}

// Connect returns a connection to srv over its TCP port, closed on cleanup.
func Connect(t testing.TB, srv *natsserver.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL(), natsconn.SyncQueue)
	if err != nil {
		t.Fatalf("natstest: connecting: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on a new connection to srv.
func JetStream(t testing.TB, srv *natsserver.Server) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Connect(t, srv))
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return js
}

// NewJetStream starts a server for the test as RunJetStream does and returns a JetStream
// context on a new connection to it.
func NewJetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	return JetStream(t, RunJetStream(t))
}

// Logger returns a logger for the services a test starts: discarding, or debug output to
// stderr when FLOW_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("FLOW_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// BenchConnect returns a function that dials the server a benchmark runs against, each
// connection closed when b ends: FLOW_BENCH_NATS_URL's server when that is set (with
// natsconn.SyncQueue), else an embedded server with fsync policy sync (natsserver.Config.Sync),
// started now and shut down when b ends. The embedded server is dialled in-process, or over its
// URL with urlOpts when FLOW_BENCH_CONN=url.
func BenchConnect(b testing.TB, sync string, urlOpts ...nats.Option) func() *nats.Conn {
	b.Helper()
	external := os.Getenv("FLOW_BENCH_NATS_URL")
	var srv *natsserver.Server
	if external == "" {
		var err error
		srv, err = natsserver.Start(natsserver.Config{Dir: b.TempDir(), Port: -1, Sync: sync,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(srv.Shutdown)
	}
	return func() *nats.Conn {
		var nc *nats.Conn
		var err error
		switch {
		case external != "":
			nc, err = nats.Connect(external, natsconn.SyncQueue)
		case os.Getenv("FLOW_BENCH_CONN") == "url":
			nc, err = nats.Connect(srv.ClientURL(), urlOpts...)
		default:
			nc, err = srv.Connect()
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
}
