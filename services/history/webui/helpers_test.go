package webui_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// The web UI is tested as the history service serves it (historytest), behind its
// authentication, with an ingress for its actions.

var quiet = historytest.Quiet

// testBundle is what setup started (historytest.Setup), and base, the history service's HTTP
// address.
type testBundle struct {
	*historytest.Bundle
	base string
}

// setup starts a server, a history service (HTTP on a free port), a scheduler and a worker of
// the test workflows, and returns a client (historytest.Setup).
func setup(t *testing.T) *testBundle {
	t.Helper()
	b := historytest.Setup(t)
	return &testBundle{Bundle: b, base: b.History.HTTPAddr()}
}

// completedSteps starts run runID of "steps" with n steps and waits until it completed.
func (b *testBundle) completedSteps(t *testing.T, runID string, n int) {
	t.Helper()
	_, err := b.Client.Start(b.Ctx, "steps", n, &flow.StartOptions{RunID: runID})
	require.NoError(t, err)
	require.NoError(t, b.Client.Result(b.Ctx, runID, new(int)))
}

// storeBundle is a history service and its ingress on a server of their own, for a test that
// writes runs' history itself, runs that no worker decides.
type storeBundle struct {
	base string // the history service's HTTP address
	st   *jsstore.Store
	now  time.Time // when the test began, for the events' times
}

// setupStore starts a server and a history service and its ingress (historytest.StartHistory), and opens a
// store of the server's history.
func setupStore(t *testing.T) *storeBundle {
	t.Helper()
	srv := natstest.RunJetStream(t)
	h := historytest.StartHistory(t, srv)
	st, err := jsstore.New(t.Context(), natstest.JetStream(t, srv), &jsstore.Options{Source: "flow/test"})
	require.NoError(t, err)
	return &storeBundle{base: h.HTTPAddr(), st: st, now: time.Now().UTC()}
}

// append appends events to run runID's history, which holds after events.
func (b *storeBundle) append(t *testing.T, runID string, after uint64, events ...event.Event) {
	t.Helper()
	_, err := b.st.Append(t.Context(), runID, after, events...)
	require.NoError(t, err)
}
