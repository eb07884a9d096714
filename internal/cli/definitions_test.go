package cli_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDefinitions lists the definitions of `flow dev`'s worker.
func TestDefinitions(t *testing.T) {
	t.Parallel()
	dev, url := startDevListening(t, "--http", "off", "--ingress-http", "127.0.0.1:0")
	nats := "--nats-url=" + url

	r := run(t, "definitions", nats)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	examples := []string{"approval", "child", "fanout", "invoice", "order", "parent", "reminder", "webhook"}
	require.Len(t, lines, len(examples)+1, r.stdout)
	require.Regexp(t, `^DEFINITION\s+QUEUE\s+BUILD\s+WORKERS\s+LAST HEARTBEAT$`, lines[0])
	for i, name := range examples {
		require.Regexp(t, regexp.MustCompile(`^`+name+`\s+default\s+\S+\s+1 \(\S+-\d+\)\s+(just now|\ds ago)$`), lines[i+1])
	}

	r = run(t, "definitions", "--json", nats)
	require.Equal(t, 0, r.code, r.stderr)
	var defs []struct {
		Definition string `json:"definition"`
		Queue      string `json:"queue"`
		Workers    []struct {
			Name   string    `json:"name"`
			Host   string    `json:"host"`
			BeatAt time.Time `json:"beat_at"`
		} `json:"workers"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &defs))
	require.Len(t, defs, len(examples))
	for _, d := range defs {
		require.Equal(t, "default", d.Queue)
		require.Len(t, d.Workers, 1)
		require.NotEmpty(t, d.Workers[0].Host)
		require.False(t, d.Workers[0].BeatAt.IsZero())
	}

	r = run(t, "definitions", "--queue", "default", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "order")
	r = run(t, "definitions", "--queue", "nothing-here", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "No definitions on queue nothing-here. Start a worker that registers some on it.\n", r.stdout)
	r = run(t, "definitions", "--queue", "nothing-here", "--json", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "[]\n", r.stdout)
	r = run(t, "definitions", "order", nats)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "flow definitions takes 0 argument(s)")
	r = run(t, "definitions", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "Usage:")

	dev.stopAndWait(t)
}
