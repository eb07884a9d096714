package backend_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
)

// Open gives a role the ports it asks for, the host its faults, and an engine that runs on them.
func TestOpenRoles(t *testing.T) {
	ctx := t.Context()
	js := natstest.JetStream(t, natstest.RunJetStream(t))
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}))

	plain, err := backend.Open(ctx, js, backend.Role{Source: "flow/test", Logger: natstest.Logger()}, engine.Config{CacheSize: -1})
	require.NoError(t, err)
	require.NotNil(t, plain.Store)
	require.NotNil(t, plain.Host)
	require.NotNil(t, plain.Engine)
	require.Nil(t, plain.Payloads)
	require.Nil(t, plain.Checkpoints)
	require.Nil(t, plain.Heartbeats)
	runID, created, err := plain.Engine.Start(ctx, engine.StartParams{RunID: "r1", Spec: event.Spec{Definition: "d"}, Input: []byte("null"),
		Queue: streams.DefaultQueue})
	require.NoError(t, err)
	require.True(t, created)
	snap, err := plain.Engine.Snapshot(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, "d", snap.Spec.Definition)

	faults := &fault.Injector{}
	wrapped := 0
	full, err := backend.Open(ctx, js, backend.Role{Source: "flow/worker/default", Unsigned: true, Logger: natstest.Logger(),
		Faults: faults, HostFaults: faults, Payloads: true, PayloadThreshold: 1024, Checkpoints: true, Heartbeats: true,
		Host: func(h *jshost.Host) engine.Host { wrapped++; return h }}, engine.Config{})
	require.NoError(t, err)
	require.NotNil(t, full.Payloads)
	require.Equal(t, 1024, full.Payloads.Threshold())
	require.NotNil(t, full.Checkpoints)
	require.NotNil(t, full.Heartbeats)
	require.Equal(t, 1, wrapped)
	require.Same(t, faults, full.Host.Faults)
	require.Nil(t, plain.Host.Faults, "a role without HostFaults has a host without faults")
}
