package cli_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/cli"
)

// `flow dev` is one process: its history listener serves /readyz and the whole process's
// /metrics. (Parallel tests each run a flow dev, each calling telemetry.Setup: which one
// /metrics serves is the latest, so the test does not look for its own resource.)
func TestDevServesProbesAndMetrics(t *testing.T) {
	t.Parallel()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctx, stopDev := context.WithCancel(t.Context())
	var devOut, devErr syncBuffer
	devDone := make(chan int, 1)
	go func() {
		devDone <- cli.Main(ctx, []string{"dev", "--dir", t.TempDir(), "--listen", listen, "--http", "127.0.0.1:0", "--ingress-http", "off",
			"--log-level", "warn"}, &devOut, &devErr)
	}()
	require.Eventually(t, func() bool { return strings.Contains(devOut.String(), "Flow is running.") }, 20*time.Second, 10*time.Millisecond,
		"flow dev did not start: %s", devErr.String())
	m := regexp.MustCompile(`History\s+http://(\S+)/v1/runs`).FindStringSubmatch(devOut.String())
	require.NotNil(t, m, devOut.String())
	base := "http://" + m[1]
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get("/readyz")
	require.Equal(t, 200, code, body)
	code, body = get("/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, "# TYPE go_goroutines gauge")

	stopDev()
	select {
	case code := <-devDone:
		require.Equal(t, 0, code, devErr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("flow dev did not stop")
	}
}
