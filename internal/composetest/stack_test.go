package composetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// services are the compose services, each one container.
var services = []string{"nats-1", "nats-2", "nats-3", "history", "scheduler", "ingress", "worker-1", "worker-2"}

// stack is one compose project of docker-compose.yml.
type stack struct {
	t       *testing.T
	root    string   // the repository
	compose []string // "docker-compose" or "docker compose"
	project string
	tag     string   // the images' tag
	env     []string // the variables compose interpolates
	token   string   // the ingress's bearer token
	ingress string   // base URL of the ingress's HTTP API
	history string   // base URL of the history service's HTTP API
}

// requireDocker skips the test unless the Docker daemon answers and a compose tool exists, and
// returns the compose command.
func requireDocker(t *testing.T) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the compose chaos test builds images and runs a stack of 8 containers")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("Docker is not available, so the compose chaos test does not run (docker info: %v: %s)", err, bytes.TrimSpace(out))
	}
	if exec.Command("docker-compose", "version").Run() == nil {
		return []string{"docker-compose"}
	}
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	t.Skip("neither docker-compose nor the docker compose plugin is installed, so the compose chaos test does not run")
	return nil
}

// repoRoot returns the repository's root: the directory of go.mod above the test's.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "docker-compose.yml")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no docker-compose.yml above the test's directory")
		dir = parent
	}
}

// freePort returns a loopback TCP port free now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// newStack names a stack of its own: project and image tag flowtest-<random>, free published
// ports, random passwords, and a tokens file with a random bearer token.
func newStack(t *testing.T, compose []string) *stack {
	id := "flowtest-" + randomHex(t, 4)
	s := &stack{t: t, root: repoRoot(t), compose: compose, project: id, tag: id, token: "tok-" + randomHex(t, 16)}
	tokens := filepath.Join(t.TempDir(), "ingress-tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("# the compose test's token\n"+s.token+"\n"), 0o644))
	natsPort, historyPort, ingressPort := freePort(t), freePort(t), freePort(t)
	s.history = "http://127.0.0.1:" + strconv.Itoa(historyPort)
	s.ingress = "http://127.0.0.1:" + strconv.Itoa(ingressPort)
	s.env = []string{
		"IMAGE_TAG=" + s.tag,
		"FLOW_PUBLISH_ADDRESS=127.0.0.1",
		"FLOW_NATS_PORT=" + strconv.Itoa(natsPort),
		"FLOW_HISTORY_PORT=" + strconv.Itoa(historyPort),
		"FLOW_INGRESS_PORT=" + strconv.Itoa(ingressPort),
		"FLOW_INGRESS_TOKENS_SECRET=" + tokens,
		// scripts/images.sh builds the binaries here, not over the developer's bin/linux.
		"OUT=" + t.TempDir(),
	}
	for _, role := range []string{"HISTORY", "SCHEDULER", "INGRESS", "WORKER", "CLIENT"} {
		// A letter first: nats-server reads a variable's value as a config value (1234 is a number).
		s.env = append(s.env, "NATS_"+role+"_PASSWORD=p"+randomHex(t, 12))
	}
	return s
}

// command runs name args in the repository with the stack's variables, and returns its
// combined output.
func (s *stack) command(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = s.root
	cmd.Env = append(os.Environ(), s.env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// composeCmd runs the compose tool on the stack's project.
func (s *stack) composeCmd(ctx context.Context, args ...string) (string, error) {
	full := append(append(s.compose[1:len(s.compose):len(s.compose)], "-p", s.project, "-f", filepath.Join(s.root, "docker-compose.yml")), args...)
	return s.command(ctx, s.compose[0], full...)
}

// buildImages runs scripts/images.sh with the stack's tag, building into a temporary directory.
func (s *stack) buildImages(ctx context.Context) {
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := s.command(ctx, "docker", "rmi", "flowrun/flow:"+s.tag, "flowrun/nats:"+s.tag); err != nil {
			s.t.Logf("removing the test's images: %v: %s", err, out)
		}
	})
	out, err := s.command(ctx, "scripts/images.sh")
	s.t.Log(strings.TrimSpace(out))
	require.NoError(s.t, err, "make images")
}

// up starts the stack and registers its teardown (after dumping its logs if the test failed).
func (s *stack) up(ctx context.Context) {
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if s.t.Failed() {
			out, _ := s.composeCmd(ctx, "ps")
			s.t.Logf("docker-compose ps:\n%s", out)
			out, _ = s.composeCmd(ctx, "logs", "--no-color", "--timestamps", "--tail", "1500")
			s.t.Logf("docker-compose logs:\n%s", out)
		}
		if out, err := s.composeCmd(ctx, "down", "-v", "--remove-orphans", "--timeout", "5"); err != nil {
			s.t.Errorf("tearing the stack down: %v: %s (remove it with docker-compose -p %s down -v)", err, out, s.project)
		}
	})
	// docker-compose 1.29 gives up on a dependency whose container exited, even while its restart
	// policy brings it back (a service whose first JetStream request timed out while the cluster
	// formed on a busy machine): a second up waits for it, as docs/deploy.md advises.
	_, err := s.composeCmd(ctx, "up", "-d", "--no-build")
	if err != nil {
		s.t.Logf("docker-compose up failed; running it again: %v", err)
		_, err = s.composeCmd(ctx, "up", "-d", "--no-build")
	}
	require.NoError(s.t, err, "docker-compose up")
}

// container returns the ID of service's container.
func (s *stack) container(ctx context.Context, service string) (string, error) {
	out, err := s.composeCmd(ctx, "ps", "-q", service)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(out)
	if id == "" {
		return "", fmt.Errorf("service %s has no container", service)
	}
	return id, nil
}

// waitHealthy returns once every service's container reports healthy.
func (s *stack) waitHealthy(ctx context.Context) {
	ids := make([]string, len(services))
	for i, svc := range services {
		id, err := s.container(ctx, svc)
		require.NoError(s.t, err)
		ids[i] = id
	}
	var last string
	for {
		out, err := s.command(ctx, "docker", append([]string{"inspect", "--format", "{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}no-healthcheck{{end}}"}, ids...)...)
		if err == nil {
			last = out
			if strings.Count(out, " healthy\n") == len(ids) {
				return
			}
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("the stack did not become healthy: %v; last seen:\n%s", ctx.Err(), last)
		case <-time.After(time.Second):
		}
	}
}

// docker runs `docker verb` on service's container: kill (SIGKILL; Docker counts it as a stop by
// hand, so the restart policy leaves the container down) or start.
func (s *stack) docker(ctx context.Context, verb, service string) error {
	id, err := s.container(ctx, service)
	if err == nil {
		_, err = s.command(ctx, "docker", verb, id)
	}
	return err
}
