// Package ingresstest starts the ingress service for tests of other packages, and starts runs
// behind its back for tests of runs whose workers are gone.
package ingresstest

import (
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/services/ingress"
)

// Start starts an ingress service with cfg (HTTP off unless cfg says otherwise) and stops it
// when the test ends.
func Start(t testing.TB, cfg ingress.Config) *ingress.Service {
	t.Helper()
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "off"
	}
	in, err := ingress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Stop() })
	return in
}

// Accepted appends the start of run runID of definition (pinned to build, "" for any) on the
// default queue with input (JSON), as the ingress accepts a start while a worker serves the
// definition: for tests of runs whose workers are gone since. It returns the run ID.
func Accepted(t testing.TB, nc *nats.Conn, definition, runID string, input any, build string) string {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	be, err := backend.Open(t.Context(), js, backend.Role{Source: "flow/test", Logger: slog.New(slog.DiscardHandler)}, engine.Config{CacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	eng := be.Engine
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	id, _, err := eng.Start(t.Context(), engine.StartParams{RunID: runID, Spec: event.Spec{Definition: definition, BuildID: build},
		Input: in, Queue: streams.DefaultQueue})
	if err != nil {
		t.Fatal(err)
	}
	return id
}
