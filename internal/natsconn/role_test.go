package natsconn

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A Config for a role dials with the role's inbox prefix, unless the NATS context sets one.
func TestRoleInboxPrefix(t *testing.T) {
	t.Run("Role", func(t *testing.T) {
		isolate(t)
		r, err := Config{}.As(RoleWorker).resolve()
		require.NoError(t, err)
		require.Equal(t, "_INBOX.worker", r.inboxPrefix)
		r, err = Config{}.resolve()
		require.NoError(t, err)
		require.Empty(t, r.inboxPrefix, "no role: nats.go's default")
	})
	t.Run("ContextWins", func(t *testing.T) {
		dir := isolate(t)
		writeContext(t, dir, "ops", `{"inbox_prefix": "_INBOX.ops"}`)
		selectContext(t, dir, "ops")
		r, err := Config{}.As(RoleClient).resolve()
		require.NoError(t, err)
		require.Equal(t, "_INBOX.ops", r.inboxPrefix)
	})
}
