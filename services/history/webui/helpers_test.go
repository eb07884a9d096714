package webui_test

import (
	"context"
	"testing"

	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/worker"
)

// The web UI is tested as the history service serves it (historytest), behind its
// authentication, with an ingress for its actions.

var quiet = historytest.Quiet

type testBundle struct {
	history *history.Service
	client  *flow.Client
	ctx     context.Context
}

// setup starts a server, a history service (HTTP on a free port), a scheduler and a worker of
// the test workflows, and returns a client (historytest.Setup).
func setup(t *testing.T) *testBundle {
	t.Helper()
	b := historytest.Setup(t)
	return &testBundle{history: b.History, client: b.Client, ctx: b.Ctx}
}

func startHistory(t *testing.T, srv *natsserver.Server) *history.Service {
	t.Helper()
	return historytest.StartHistory(t, srv)
}

func startWorker(t *testing.T, srv *natsserver.Server, reg *flow.Registry) *worker.Worker {
	t.Helper()
	return historytest.StartWorker(t, srv, reg)
}
