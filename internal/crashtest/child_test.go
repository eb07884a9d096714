package crashtest

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/proctest"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// The environment of a child process.
const (
	envRole     = "FLOW_CRASHTEST_ROLE"      // "worker", "scheduler" or "history"; unset in the parent
	envNATSURL  = "FLOW_NATS_URL"            // the parent's embedded NATS server
	envName     = "FLOW_CRASHTEST_NAME"      // the child's name: scheduler replica, invocation tag
	envDir      = "FLOW_CRASHTEST_DIR"       // the scratch directory shared with the parent
	envAckWait  = "FLOW_CRASHTEST_ACK_WAIT"  // worker.Config.AckWait
	envLeaseTTL = "FLOW_CRASHTEST_LEASE_TTL" // Streams.LeaseTTL of workers and schedulers
	envHTTP     = "FLOW_CRASHTEST_HTTP"      // the ingress's HTTP address
)

const (
	roleWorker    = "worker"
	roleScheduler = "scheduler"
	roleHistory   = "history"
	roleIngress   = "ingress"
	// roleNATS runs nats-server with JetStream on Dir, listening on NATSURL's port.
	roleNATS = "nats"
)

// TestMain runs the tests, or, in a child process, the service the parent asked for.
func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		if err := runChild(role); err != nil {
			fmt.Fprintf(os.Stderr, "crashtest child %s: %v\n", role, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild starts the service of role and signals readiness; it returns only an error. The
// process exits when stdin closes (the parent closed it or died) or when the parent kills it; it
// never stops the service gracefully.
func runChild(role string) error {
	level := slog.LevelInfo
	if os.Getenv("FLOW_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).
		With(slog.String("child", os.Getenv(envName)), slog.Int("pid", os.Getpid()))
	// Exit as soon as stdin closes, whatever the service is doing: even while it starts, so that
	// a child never outlives its parent (a start against the parent's dead NATS server would
	// otherwise retry until its context ends).
	proctest.ExitWithStdin(logger)
	streamsCfg, err := childStreams()
	if err != nil {
		return err
	}
	// FLOW_FAULTS arms fault points, to kill the process between two writes.
	faults, err := fault.FromEnv()
	if err != nil {
		return err
	}
	if role == roleNATS {
		if err := startNATS(logger); err != nil {
			return err
		}
	} else {
		service, err := newService(role, logger, streamsCfg, faults)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := service.Start(ctx); err != nil {
			return err
		}
	}
	if err := proctest.Ready(); err != nil {
		return err
	}
	logger.Info("child ready")
	select {} // until stdin closes or the parent kills the process
}

// newService returns the service of role, connected to the parent's NATS server.
func newService(role string, logger *slog.Logger, streamsCfg streams.Config, faults *fault.Injector) (interface{ Start(context.Context) error }, error) {
	conn := natsconn.Config{URL: os.Getenv(envNATSURL)}
	switch role {
	case roleWorker:
		ackWait, err := durationEnv(envAckWait)
		if err != nil {
			return nil, err
		}
		reg := newRegistry(os.Getenv(envDir), os.Getenv(envName))
		return worker.New(worker.Config{NATS: conn, AckWait: ackWait, Streams: streamsCfg, Logger: logger, Faults: faults}, reg)
	case roleScheduler:
		return scheduler.New(scheduler.Config{NATS: conn, Name: os.Getenv(envName), Streams: streamsCfg, Logger: logger, Faults: faults})
	case roleHistory:
		ackWait, err := durationEnv(envAckWait)
		if err != nil {
			return nil, err
		}
		return history.New(history.Config{NATS: conn, HTTPAddr: "off", AckWait: ackWait, Streams: streamsCfg, Logger: logger, Faults: faults})
	case roleIngress:
		return ingress.New(ingress.Config{NATS: conn, HTTPAddr: os.Getenv(envHTTP), Streams: streamsCfg, Logger: logger, Faults: faults})
	default:
		return nil, fmt.Errorf("unknown role %q", role)
	}
}

// startNATS starts the NATS server the parent named, on its port, storing in the parent's
// directory.
func startNATS(logger *slog.Logger) error {
	u, err := url.Parse(os.Getenv(envNATSURL))
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return fmt.Errorf("%s has no port: %w", envNATSURL, err)
	}
	_, err = natsserver.Start(natsserver.Config{Dir: filepath.Join(os.Getenv(envDir), "nats"), Host: u.Hostname(), Port: port, Logger: logger})
	return err
}

// childStreams returns the streams config the parent asked for.
func childStreams() (streams.Config, error) {
	ttl, err := durationEnv(envLeaseTTL)
	return streams.Config{LeaseTTL: ttl}, err
}

// durationEnv parses the duration in variable name; unset means 0 (the default).
func durationEnv(name string) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}
