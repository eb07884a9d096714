package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
)

// ownerBundle is a history service that writes checkpoints every 10 events, reconciles and
// sweeps only when the test says (Reconcile, Sweep, by the bundle's clock, with a default
// retention of a day), an ingress and a worker of retentionRegistry and "ticks"; no scheduler,
// so that delayed runs stay delayed.
type ownerBundle struct {
	srv    *natsserver.Server
	h      *history.Service
	client *flow.Client
	cps    *objstore.Checkpoints
	clock  *virtualClock
	ctx    context.Context
}

// ticks waits for signal "stop" while "tick" signals pile up, and completes with their count.
func ticks(ctx *flow.Context, _ any) (flow.Decision, error) {
	if ctx.Signal("stop") != nil {
		return ctx.Complete(ctx.Snapshot().Progress.SignalsReceived), nil
	}
	return ctx.AwaitSignal("stop", "stop"), nil
}

func setupOwner(t *testing.T) *ownerBundle {
	t.Helper()
	srv := natstest.RunJetStream(t)
	b := &ownerBundle{srv: srv, clock: &virtualClock{}}
	reg := retentionRegistry()
	flow.RegisterWorkflow(reg, "ticks", ticks)
	b.h, b.client = startEnv(t, srv, history.Config{RetentionSweep: -1, ReconcileInterval: -1, Retention: 24 * time.Hour,
		Clock: b.clock.Now, CheckpointEvery: 10}, reg)
	var cancel context.CancelFunc
	b.ctx, cancel = context.WithTimeout(t.Context(), 120*time.Second)
	t.Cleanup(cancel)
	var err error
	b.cps, err = objstore.OpenCheckpoints(b.ctx, natstest.JetStream(t, srv), streams.CheckpointsBucket)
	require.NoError(t, err)
	return b
}

// indexed waits until the service's copy of the runs index shows run runID as want says.
func (b *ownerBundle) indexed(t *testing.T, runID string, want func(core.Summary) bool) {
	t.Helper()
	require.Eventually(t, func() bool { sum, ok := b.h.IndexedEntry(runID); return ok && want(sum) },
		30*time.Second, 5*time.Millisecond, "run %s in the index", runID)
}

// status returns a condition on an index entry: the run is in status st.
func status(st core.Status) func(core.Summary) bool {
	return func(sum core.Summary) bool { return sum.Status == st }
}
