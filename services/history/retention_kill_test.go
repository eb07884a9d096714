package history_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/archive"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/services/history"
)

// The child process of TestRetentionKill reads these.
const (
	envKillChild = "FLOW_TEST_RETENTION_CHILD"
	envKillNATS  = "FLOW_TEST_RETENTION_NATS"
	envKillAhead = "FLOW_TEST_RETENTION_AHEAD"
)

// TestRetentionKill: a history service in a child process is killed (SIGKILL) by a fault point
// in the middle of deleting a run, at each point between the sweeper's writes; a restarted
// sweeper finishes the deletion, and the run's archive reads back whole.
func TestRetentionKill(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	for i, p := range fault.RetentionPoints {
		runID := fmt.Sprintf("killed-%d", i)
		b.clock.advance(0)
		h := b.sweeper(t, archive.ObjectStore, nil)
		want := b.start(t, h, "short", nil, runID)
		require.NoError(t, h.Stop())

		cmd := exec.Command(os.Args[0], "-test.run=^TestRetentionKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), envKillChild+"=1", envKillNATS+"="+b.srv.ClientURL(), envKillAhead+"=2h",
			fault.EnvVar+"="+string(p)+":"+string(fault.Kill))
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "the child was killed at %s, not %v:\n%s", p, err, out)
		status, ok := exit.Sys().(syscall.WaitStatus)
		require.True(t, ok && status.Signaled() && status.Signal() == syscall.SIGKILL, "killed at %s: %v\n%s", p, err, out)

		if p == fault.RetentionAfterArchive {
			require.Nil(t, b.entry(t, runID).Deleted, "point %s: nothing is recorded before the archive is written", p)
			require.Equal(t, uint64(len(want)), b.stored(t, runID))
		}
		// Past the record, the history service (this test's own consumes) finishes the
		// deletion; before it, a restarted sweeper deletes the run.
		b.clock.advance(2 * time.Hour)
		b.restartedSweepDeletes(t, runID, want)
	}
}

// TestRetentionKillChild is TestRetentionKill's child process: a history service that sweeps
// once, by a clock FLOW_TEST_RETENTION_AHEAD ahead, with the fault points of FLOW_FAULTS armed.
func TestRetentionKillChild(t *testing.T) {
	if os.Getenv(envKillChild) == "" {
		t.Skip("the child process of TestRetentionKill")
	}
	faults, err := fault.FromEnv()
	require.NoError(t, err)
	ahead, err := time.ParseDuration(os.Getenv(envKillAhead))
	require.NoError(t, err)
	nc, err := nats.Connect(os.Getenv(envKillNATS))
	require.NoError(t, err)
	defer nc.Close()
	h, err := history.New(history.Config{Conn: nc, HTTPAddr: "off", Logger: quiet, RetentionSweep: -1,
		Clock: func() time.Time { return time.Now().Add(ahead) }, Faults: faults})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, h.Start(ctx))
	_, err = h.Sweep(ctx)
	t.Fatalf("the sweep returned (%v) instead of being killed", err)
}
