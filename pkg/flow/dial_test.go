package flow

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natstest"
)

// Dial connects with the client role's inbox prefix, the only inboxes Flow's NATS permissions
// let the client subscribe to.
func TestDialUsesTheClientInboxPrefix(t *testing.T) {
	srv := natstest.RunJetStream(t)
	c, err := Dial(t.Context(), srv.ClientURL(), nil)
	require.NoError(t, err)
	defer c.Close()
	require.True(t, strings.HasPrefix(c.nc.NewRespInbox(), ClientInboxPrefix+"."), c.nc.NewRespInbox())
}
