package natsconn_test

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natstest"
)

// A connection dialed for a role makes its reply inboxes under the role's prefix.
func TestDialAsRole(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no NATS context
	for _, name := range []string{"FLOW_NATS_CONTEXT", "NATS_CONTEXT", "FLOW_NATS_USER", "NATS_USER", "FLOW_NATS_CREDS", "NATS_CREDS",
		"FLOW_NATS_NKEY", "NATS_NKEY", "FLOW_NATS_TOKEN"} {
		t.Setenv(name, "")
	}
	srv := natstest.RunServer(t, &server.Options{})
	nc, err := natsconn.Config{URL: srv.ClientURL()}.As(natsconn.RoleScheduler).Dial("role-test")
	require.NoError(t, err)
	defer nc.Close()
	require.Regexp(t, `^_INBOX\.scheduler\.`, nc.NewRespInbox())
}
