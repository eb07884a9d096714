// Package proctest runs parts of a test as child processes of the test binary, so that a test
// can kill them with SIGKILL: the crash tests (internal/crashtest) and the torture test
// (internal/torture) run Flow's services this way.
//
// The parent calls [Start]: the test binary is re-executed (os.Args[0], running no test) with
// the environment the caller gives, which tells the child's TestMain what to be. The child
// calls [ExitWithStdin] first, starts what it serves, then calls [Ready], which writes a line
// on file descriptor 3; Start returns once it is read. A child exits when its stdin closes,
// which happens when the parent closes it or dies, so no child outlives the test binary.
package proctest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// ReadyFD is the file descriptor on which a child writes a line once it is serving.
const ReadyFD = 3

// ReadyTimeout bounds a child's start, which under the race detector on a loaded machine takes
// from a few hundred milliseconds to seconds.
const ReadyTimeout = 30 * time.Second

// Options describe a child process.
type Options struct {
	// Name names the child in logs and in its log file.
	Name string
	// Env is the child's environment: this process's, plus these "KEY=value" entries.
	Env []string
	// LogDir is where its log file (stdout and stderr) is written. Defaults to t.TempDir().
	LogDir string
}

// Child is a running child process.
type Child struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	exited  chan struct{} // closed once the process has exited and been reaped
	err     error         // how it exited, set before exited is closed
}

// Start starts a child and returns once it is ready. The child is killed when t ends, and its
// log is printed if t failed (or always with FLOW_TEST_LOG set). Start may be called from any
// goroutine: it reports failures as errors, never through t.
func Start(t testing.TB, opts Options) (*Child, error) {
	dir := opts.LogDir
	if dir == "" {
		dir = t.TempDir()
	}
	logPath := filepath.Join(dir, opts.Name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }() // the child holds its own descriptor
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer func() { _ = readyR.Close() }()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{readyW} // descriptor ReadyFD in the child
	stdin, err := cmd.StdinPipe()       // the child exits when it closes
	if err != nil {
		_ = readyW.Close()
		return nil, err
	}
	err = cmd.Start()
	_ = readyW.Close()
	if err != nil {
		return nil, err
	}
	c := &Child{name: opts.Name, logPath: logPath, cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.Kill()
		if t.Failed() || os.Getenv("FLOW_TEST_LOG") != "" {
			t.Logf("child %s (%v) log:\n%s", c.name, c.ExitErr(), c.Log())
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
		if err != nil {
			c.Kill()
			return nil, fmt.Errorf("child %s exited before it was ready (%v); its log:\n%s", opts.Name, err, c.Log())
		}
	case <-time.After(ReadyTimeout):
		c.Kill()
		return nil, fmt.Errorf("child %s not ready within %s; its log:\n%s", opts.Name, ReadyTimeout, c.Log())
	}
	return c, nil
}

// Name returns the child's name.
func (c *Child) Name() string { return c.name }

// Log returns what the child wrote so far.
func (c *Child) Log() string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return fmt.Sprintf("(reading its log: %v)", err)
	}
	return string(b)
}

// Exited is closed once the process has exited.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// ExitErr returns how the child exited, or nil while it runs.
func (c *Child) ExitErr() error {
	select {
	case <-c.exited:
		return c.err
	default:
		return nil
	}
}

// ErrNotExited is returned by Kill when the process did not exit within 10 seconds of SIGKILL.
var ErrNotExited = errors.New("proctest: the child did not exit within 10s of SIGKILL")

// Kill sends SIGKILL and returns once the process has exited. Killing a dead child is a no-op.
func (c *Child) Kill() error {
	_ = c.cmd.Process.Kill() // fails only if the process already exited
	defer func() { _ = c.stdin.Close() }()
	select {
	case <-c.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%w: %s", ErrNotExited, c.name)
	}
}

// ExitWithStdin makes the child process exit as soon as its stdin closes, whatever it is
// doing: even while it starts, so that a child never outlives its parent. Call it first.
func ExitWithStdin(logger *slog.Logger) {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		logger.Info("stdin closed; exiting")
		os.Exit(0)
	}()
}

// Ready tells the parent that the child serves.
func Ready() error {
	ready := os.NewFile(ReadyFD, "ready")
	if _, err := fmt.Fprintln(ready, "ready"); err != nil {
		return fmt.Errorf("signalling readiness: %w", err)
	}
	return ready.Close()
}
