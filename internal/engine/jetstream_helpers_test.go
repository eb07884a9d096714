package engine_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natstest"
)

// flowJetStream runs an embedded nats-server for t with Flow's streams and buckets created, and
// returns a JetStream client of it.
func flowJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	js := natstest.JetStream(t, natstest.RunJetStream(t))
	require.NoError(t, streams.Ensure(t.Context(), js, streams.Config{}))
	return js
}

// newJSHost returns a JetStream host on js, as source "flow/test".
func newJSHost(t *testing.T, js jetstream.JetStream) *jshost.Host {
	t.Helper()
	host, err := jshost.New(t.Context(), js, "flow/test", natstest.Logger())
	require.NoError(t, err)
	return host
}
