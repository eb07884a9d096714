package torture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/proctest"
	"github.com/flowrun/flow/pkg/flow"
)

// The environment of a service process (package proctest runs it): this test binary, whose
// TestMain calls runChild when envRole is set.
const (
	envRole       = "FLOW_TORTURE_ROLE"
	envURL        = "FLOW_TORTURE_NATS_URL"
	envReplicas   = "FLOW_TORTURE_REPLICAS"
	envPartitions = "FLOW_TORTURE_PARTITIONS"
	// EnvLogDir, when set, is where the services' processes write their logs (one file each,
	// at level debug), kept after the test; by default a temporary directory, removed with it,
	// at level info.
	EnvLogDir = "FLOW_TORTURE_LOGS"
)

// processes runs each service as a process of this test binary, on an embedded server or
// cluster in this process. Kill sends SIGKILL; a Fault arms its point to kill the process (each
// service is restarted with FLOW_FAULTS set), and a process that dies at its point is started
// again, unarmed.
type processes struct {
	t        testing.TB
	url      string
	replicas int
	// partitions is the number of history streams.
	partitions int
	logDir     string
	client     *flow.Client
	js         jetstream.JetStream

	mu       sync.Mutex
	children map[string]*proctest.Child
	armed    map[string]string // role -> FLOW_FAULTS of its process
	kills    int               // deliberate kills
	died     int               // processes that died at an armed point
	started  int               // processes started, to name them
	broken   error
	stopped  bool
}

// NewProcesses starts a stack whose services are processes (see processes). Everything stops
// when t ends.
func NewProcesses(t testing.TB, replicas, partitions int) Stack {
	t.Helper()
	logDir := os.Getenv(EnvLogDir)
	if logDir == "" {
		logDir = t.TempDir()
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatalf("torture: %v", err)
	}
	s := &processes{t: t, replicas: replicas, partitions: partitions, logDir: logDir, children: map[string]*proctest.Child{}, armed: map[string]string{}}
	if replicas >= 3 {
		s.url = natstest.RunClusterWith(t, 3, partitions).URLs()
	} else {
		s.url = natstest.RunJetStreamWith(t, streams.Config{Partitions: partitions}).ClientURL()
	}
	nc, err := connect(s.url, "torture-client")
	if err != nil {
		t.Fatalf("torture: %v", err)
	}
	t.Cleanup(nc.Close)
	if s.js, err = jetstream.New(nc); err != nil {
		t.Fatalf("torture: %v", err)
	}
	if s.client, err = flow.NewClient(t.Context(), nc, nil); err != nil {
		t.Fatalf("torture: %v", err)
	}
	t.Cleanup(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
	})
	for _, role := range []string{RoleWorker, RoleHistory, RoleIngress, RoleScheduler} {
		if err := s.start(role, ""); err != nil {
			t.Fatalf("torture: %v", err)
		}
	}
	return s
}

func connect(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url, natsconn.SyncQueue, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", url, err)
	}
	return nc, nil
}

func (s *processes) Client() *flow.Client           { return s.client }
func (s *processes) JetStream() jetstream.JetStream { return s.js }

// start starts the process of role, armed with faults (FLOW_FAULTS, "" for none), and watches
// it: if it dies on its own, it is started again unarmed.
func (s *processes) start(role, faults string) error {
	env := []string{envRole + "=" + role, envURL + "=" + s.url, envReplicas + "=" + strconv.Itoa(s.replicas),
		envPartitions + "=" + strconv.Itoa(s.partitions)}
	if faults != "" {
		env = append(env, fault.EnvVar+"="+faults)
	}
	s.mu.Lock()
	s.started++
	name := fmt.Sprintf("%s-%d", role, s.started)
	s.mu.Unlock()
	c, err := proctest.Start(s.t, proctest.Options{Name: name, Env: env, LogDir: s.logDir})
	if err != nil {
		return fmt.Errorf("starting the %s: %w", role, err)
	}
	s.mu.Lock()
	s.children[role] = c
	s.armed[role] = faults
	s.mu.Unlock()
	go s.watch(role, c)
	return nil
}

func (s *processes) watch(role string, c *proctest.Child) {
	<-c.Exited()
	s.mu.Lock()
	if s.stopped || s.children[role] != c {
		s.mu.Unlock()
		return // killed on purpose, or the test ended
	}
	s.died++
	delete(s.children, role)
	s.mu.Unlock()
	if err := s.start(role, ""); err != nil {
		s.mu.Lock()
		s.broken = errors.Join(s.broken, err)
		s.mu.Unlock()
	}
}

func (s *processes) Kill(_ context.Context, role string) error {
	return s.restart(role, "", true)
}

// restart kills the process of role and starts it again armed with faults.
func (s *processes) restart(role, faults string, counted bool) error {
	s.mu.Lock()
	c := s.children[role]
	delete(s.children, role)
	if counted {
		s.kills++
	}
	s.mu.Unlock()
	if c != nil {
		if err := c.Kill(); err != nil {
			return err
		}
	}
	return s.start(role, faults)
}

// Arm restarts every service armed to die at p's every-th hit.
func (s *processes) Arm(p fault.Point, every, _ int) {
	arm := fmt.Sprintf("%s:%s:%d", p, fault.Kill, max(every-1, 0))
	for _, role := range Roles {
		if err := s.restart(role, arm, false); err != nil {
			s.mu.Lock()
			s.broken = errors.Join(s.broken, err)
			s.mu.Unlock()
		}
	}
}

// DisarmAll restarts the services still armed, unarmed.
func (s *processes) DisarmAll() {
	for _, role := range Roles {
		s.mu.Lock()
		armed := s.armed[role] != "" && s.children[role] != nil
		s.mu.Unlock()
		if armed {
			if err := s.restart(role, "", false); err != nil {
				s.mu.Lock()
				s.broken = errors.Join(s.broken, err)
				s.mu.Unlock()
			}
		}
	}
}

func (s *processes) Alive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broken
}

func (s *processes) Counts() (died, kills int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.died, s.kills
}

// runChild runs the service of role in this process (a child of a processes stack) until its
// stdin closes or it is killed; it exits the process.
func runChild(role string) {
	level := slog.LevelInfo
	if os.Getenv(EnvLogDir) != "" {
		level = slog.LevelDebug // kept for reading: everything
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).
		With(slog.String("role", role), slog.Int("pid", os.Getpid()))
	proctest.ExitWithStdin(logger)
	if err := serveChild(role, logger); err != nil {
		fmt.Fprintf(os.Stderr, "torture child %s: %v\n", role, err)
		os.Exit(2)
	}
	select {} // until stdin closes or the parent kills the process
}

func serveChild(role string, logger *slog.Logger) error {
	faults, err := fault.FromEnv()
	if err != nil {
		return err
	}
	replicas, err := strconv.Atoi(os.Getenv(envReplicas))
	if err != nil {
		return fmt.Errorf("%s: %w", envReplicas, err)
	}
	partitions, err := strconv.Atoi(os.Getenv(envPartitions))
	if err != nil {
		return fmt.Errorf("%s: %w", envPartitions, err)
	}
	nc, err := connect(os.Getenv(envURL), "torture-"+role)
	if err != nil {
		return err
	}
	// The services live as long as the process: their context never ends.
	if _, err := startService(context.Background(), role, nc, streamsConfig(replicas, partitions), faults, logger); err != nil {
		return err
	}
	logger.Info("serving", slog.String("faults", os.Getenv(fault.EnvVar)))
	return proctest.Ready()
}
