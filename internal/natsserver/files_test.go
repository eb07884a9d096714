//go:build unix

package natsserver_test

import (
	"bytes"
	"log/slog"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natsserver"
)

// TestFileBudget: the server's client connections are capped, the process's soft limit of open
// files is raised to its hard limit, and a limit below the budget is reported.
func TestFileBudget(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	srv, err := natsserver.Start(natsserver.Config{Dir: t.TempDir(), NoListen: true, ReservedFiles: 1 << 40,
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	vz, err := srv.NATS().Varz(nil)
	require.NoError(t, err)
	require.Equal(t, natsserver.DefaultMaxConns, vz.MaxConn)

	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	require.Equal(t, lim.Max, lim.Cur, "the soft limit is the hard limit")
	require.Contains(t, log.String(), "fewer than its budget", "a budget over the limit is reported")

	_, err = natsserver.Start(natsserver.Config{Dir: t.TempDir(), NoListen: true, MaxConns: -1})
	require.ErrorContains(t, err, "MaxConns")
}
