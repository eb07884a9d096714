package natsperm_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
)

// hookToken returns the token of hook hookID of run, read from the run's history over nc (the
// history service's role, which reads FLOW_HISTORY), or "" while the hook is not created: the
// client role reads hook tokens redacted (docs/operations.md#secrets).
func hookToken(t *testing.T, ctx context.Context, nc *nats.Conn, run, hookID string) string {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := jsstore.New(ctx, js, &jsstore.Options{Source: "flow/test"})
	require.NoError(t, err)
	hist, err := st.Load(ctx, run, 0)
	if err != nil {
		return ""
	}
	for _, e := range hist {
		if p, ok := e.Payload.(*event.HookCreated); ok && p.HookID == hookID {
			return p.Token
		}
	}
	return ""
}
