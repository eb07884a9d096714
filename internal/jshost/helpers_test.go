package jshost_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natstest"
)

// hostSetup returns a JetStream client as natstest.NewJetStream does, and a host on it.
func hostSetup(t *testing.T) (jetstream.JetStream, *jshost.Host) {
	t.Helper()
	js := natstest.NewJetStream(t)
	h, err := jshost.New(t.Context(), js, "flow/test", natstest.Logger())
	require.NoError(t, err)
	return js, h
}
