package engine_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natstest"
)

// newJSHost returns a JetStream host on js, as source "flow/test".
func newJSHost(t *testing.T, js jetstream.JetStream) *jshost.Host {
	t.Helper()
	host, err := jshost.New(t.Context(), js, "flow/test", natstest.Logger())
	require.NoError(t, err)
	return host
}
