package crashtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/proctest"
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

// env returns the variables the child adds to this process's environment.
func (c childConfig) env() []string {
	env := []string{envRole + "=" + c.Role, envName + "=" + c.Name, envNATSURL + "=" + c.NATSURL, envDir + "=" + c.Dir}
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

// child is a worker or scheduler running in a child process: this test binary re-executed
// (package proctest).
type child struct {
	*proctest.Child
	exited <-chan struct{} // closed once the process has exited and been reaped
}

// startChild starts a child process and returns once its service is started (a worker
// consumes tasks, a scheduler competes for the lease). The child is killed on cleanup, and its
// log is printed if the test failed.
func startChild(t *testing.T, cfg childConfig) *child {
	t.Helper()
	c, err := proctest.Start(t, proctest.Options{Name: cfg.Name, Env: cfg.env()})
	require.NoError(t, err)
	return &child{Child: c, exited: c.Exited()}
}

// exitErr returns how the child exited, or nil while it runs.
func (c *child) exitErr() error { return c.ExitErr() }

// kill sends SIGKILL and returns once the process has exited. Killing a dead child is a no-op.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.Kill(); err != nil {
		t.Error(err)
	}
}
