package cli_test

import (
	"regexp"
	"testing"

	"github.com/flowrun/flow/internal/health/healthtest"
	"github.com/stretchr/testify/require"
)

// `flow dev` is one process: its history listener serves /readyz and the whole process's
// /metrics. (Parallel tests each run a flow dev, each calling telemetry.Setup: which one
// /metrics serves is the latest, so the test does not look for its own resource.)
func TestDevServesProbesAndMetrics(t *testing.T) {
	t.Parallel()
	dev, _ := startDevListening(t, "--http", "127.0.0.1:0", "--ingress-http", "off")
	m := regexp.MustCompile(`History\s+http://(\S+)/v1/runs`).FindStringSubmatch(dev.out.String())
	require.NotNil(t, m, dev.out.String())
	base := "http://" + m[1]
	get := func(path string) (int, string) {
		code, _, body := healthtest.Get(t, base+path)
		return code, body
	}
	code, body := get("/readyz")
	require.Equal(t, 200, code, body)
	code, body = get("/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, "# TYPE go_goroutines gauge")

	dev.stopAndWait(t)
}
