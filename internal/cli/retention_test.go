package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRetentionCLI runs `flow dev` with a one-second retention: a completed run leaves `flow
// runs`, is listed by --include-deleted, `flow history` reads its archive and says so, and an
// input for it is refused as deleted. (Not parallel: it sets the environment.)
func TestRetentionCLI(t *testing.T) {
	t.Setenv("FLOW_RETENTION", "1s")
	t.Setenv("FLOW_RETENTION_SWEEP", "200ms")
	t.Setenv("FLOW_ARCHIVE", "objectstore")
	dev, url := startDevListening(t, "--http", "off", "--ingress-http", "off")
	defer dev.stopAndWait(t)
	nats := "--server=" + url

	r := run(t, "start", "order", "--wait", "--id", "kept-briefly", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool {
		r := run(t, "runs", nats)
		return r.code == 0 && !strings.Contains(r.stdout, "kept-briefly")
	}, 30*time.Second, 50*time.Millisecond, "the run leaves the listing")

	r = run(t, "runs", "--include-deleted", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "kept-briefly")
	require.Contains(t, r.stdout, "DELETED ")

	r = run(t, "history", "kept-briefly", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "run.completed")
	require.Contains(t, r.stderr, "this history is read from its archive objectstore:FLOW_ARCHIVE/kept-briefly")

	r = run(t, "signal", "kept-briefly", "approve", nats)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `run "kept-briefly" was deleted at`)
}
