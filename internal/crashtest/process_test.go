package crashtest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/fault"
)

// childConfig describes a child process to start.
type childConfig struct {
	Role    string
	Name    string
	NATSURL string
	Dir     string
	// AckWait and LeaseTTL are passed on when set.
	AckWait  time.Duration
	LeaseTTL time.Duration
	// Faults arms fault points in the child (fault.FromEnv), to kill it between two writes.
	Faults string
	// HTTP is the ingress's HTTP address.
	HTTP string
}

// named returns a copy of c called name.
func (c childConfig) named(name string) childConfig {
	c.Name = name
	return c
}

func (c childConfig) env() []string {
	env := append(os.Environ(), envRole+"="+c.Role, envName+"="+c.Name, envNATSURL+"="+c.NATSURL, envDir+"="+c.Dir)
	if c.AckWait > 0 {
		env = append(env, envAckWait+"="+c.AckWait.String())
	}
	if c.LeaseTTL > 0 {
		env = append(env, envLeaseTTL+"="+c.LeaseTTL.String())
	}
	if c.HTTP != "" {
		env = append(env, envHTTP+"="+c.HTTP)
	}
	if c.Faults != "" {
		env = append(env, fault.EnvVar+"="+c.Faults)
	}
	return env
}

// child is a worker or scheduler running in a child process: this test binary re-executed.
type child struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{} // closed once the process has exited and been reaped
	err    error         // how it exited, set before exited is closed
}

// readyTimeout bounds a child's start, which under the race detector takes a few hundred ms.
const readyTimeout = 30 * time.Second

// startChild starts a child process and returns once its service is started (a worker
// consumes tasks, a scheduler competes for the lease). The child is killed on cleanup, and its
// log is printed if the test failed.
func startChild(t *testing.T, cfg childConfig) *child {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), cfg.Name+".log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	defer func() { _ = logFile.Close() }() // the child holds its own descriptor
	readyR, readyW, err := os.Pipe()
	require.NoError(t, err)
	defer func() { _ = readyR.Close() }()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = cfg.env()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{readyW} // descriptor 3 in the child (readyFD)
	stdin, err := cmd.StdinPipe()       // the child exits when it closes
	require.NoError(t, err)
	err = cmd.Start()
	_ = readyW.Close()
	require.NoError(t, err)
	c := &child{name: cfg.Name, cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.kill(t)
		if t.Failed() || os.Getenv("FLOW_TEST_LOG") != "" {
			b, err := os.ReadFile(logPath)
			if err != nil {
				t.Logf("child %s: reading its log: %v", c.name, err)
			}
			t.Logf("child %s (%v) log:\n%s", c.name, c.exitErr(), b)
		}
	})

	// The child writes a line on the ready pipe once serving; the pipe ends without one if the
	// child exits first.
	ready := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(readyR).ReadString('\n')
		ready <- err
	}()
	select {
	case err := <-ready:
		require.NoError(t, err, "child %s exited before it was ready (its log follows)", cfg.Name)
	case <-time.After(readyTimeout):
		t.Fatalf("child %s not ready within %s", cfg.Name, readyTimeout)
	}
	return c
}

// exitErr returns how the child exited, or nil while it runs.
func (c *child) exitErr() error {
	select {
	case <-c.exited:
		return c.err
	default:
		return nil
	}
}

// kill sends SIGKILL and returns once the process has exited. Killing a dead child is a no-op.
func (c *child) kill(t *testing.T) {
	t.Helper()
	_ = c.cmd.Process.Kill() // fails only if the process already exited
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("child %s did not exit within 10s of SIGKILL", c.name)
	}
	_ = c.stdin.Close()
}
