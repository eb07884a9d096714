package torture

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// Stack is Flow under test: NATS and the four services, run in this process or as processes.
type Stack interface {
	// Client is the client the executor acts through.
	Client() *flow.Client
	// JetStream is a JetStream context the checker reads the raw streams and buckets with.
	JetStream() jetstream.JetStream
	// Arm arms fault point p in every service: on every every-th hit, times times.
	Arm(p fault.Point, every, times int)
	// DisarmAll disarms every point.
	DisarmAll()
	// Kill kills the service of role and starts it again; it returns once the new one serves.
	Kill(ctx context.Context, role string) error
	// Alive reports an error naming a service that died and could not be started again.
	Alive() error
	// Counts returns how many service processes died at an armed fault point, and how many
	// services were killed on purpose.
	Counts() (died, kills int)
}

// Service settings of every stack: short enough that a sequence sees leases change hands,
// redeliveries, retention deletions and buffered schedule actions within seconds.
const (
	historyAckWait = 2 * time.Second
	workerAckWait  = 3 * time.Second
	leaseTTL       = 3 * time.Second
	retentionSweep = 250 * time.Millisecond
	schedulePoll   = 250 * time.Millisecond
	// defaultRetention keeps the runs of definitions without WithRetention past any sequence.
	defaultRetention = time.Hour
	schedulerName    = "torture-scheduler"
)

func streamsConfig(replicas, partitions int) streams.Config {
	return streams.Config{Replicas: replicas, Partitions: partitions, LeaseTTL: leaseTTL}
}

// inProcess runs the services in this process, on an embedded server or cluster. Kill closes a
// service's connection under it, stops it and starts a new one: the closest an in-process
// service comes to dying between two writes.
type inProcess struct {
	t        testing.TB
	url      string
	replicas int
	// partitions is the number of history streams.
	partitions int
	logger     *slog.Logger
	faults     *fault.Injector
	client     *flow.Client
	js         jetstream.JetStream

	mu       sync.Mutex
	services map[string]*service
	kills    int
	armed    map[fault.Point]bool
}

// service is one running service with its own connection.
type service struct {
	nc   *nats.Conn
	stop func() error
}

// NewInProcess starts a stack in this process: an embedded server (replicas 1) or a cluster of
// three (replicas 3), and the four services, on a history of partitions streams (0: one).
// Everything stops when t ends.
func NewInProcess(t testing.TB, replicas, partitions int) Stack {
	t.Helper()
	s := &inProcess{t: t, replicas: replicas, partitions: partitions, logger: natstest.Logger(), faults: &fault.Injector{},
		services: map[string]*service{}, armed: map[fault.Point]bool{}}
	if replicas >= 3 {
		c := natstest.RunClusterWith(t, 3, partitions)
		s.url = c.URLs()
	} else {
		s.url = natstest.RunJetStreamWith(t, streams.Config{Partitions: partitions}).ClientURL()
	}
	nc := s.connect("torture-client")
	t.Cleanup(nc.Close)
	var err error
	if s.js, err = jetstream.New(nc); err != nil {
		t.Fatalf("torture: %v", err)
	}
	if s.client, err = flow.NewClient(t.Context(), nc, nil); err != nil {
		t.Fatalf("torture: %v", err)
	}
	// The worker first: the others refuse starts of definitions no live worker serves.
	for _, role := range []string{RoleWorker, RoleHistory, RoleIngress, RoleScheduler} {
		if err := s.start(t.Context(), role); err != nil {
			t.Fatalf("torture: starting the %s: %v", role, err)
		}
	}
	t.Cleanup(s.stopAll)
	return s
}

func (s *inProcess) connect(name string) *nats.Conn {
	nc, err := nats.Connect(s.url, natsconn.SyncQueue, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		s.t.Fatalf("torture: connecting: %v", err)
	}
	return nc
}

func (s *inProcess) Client() *flow.Client           { return s.client }
func (s *inProcess) JetStream() jetstream.JetStream { return s.js }

func (s *inProcess) Arm(p fault.Point, every, times int) {
	s.faults.ArmEvery(p, fault.Fail, every, times)
	s.mu.Lock()
	s.armed[p] = true
	s.mu.Unlock()
}

func (s *inProcess) DisarmAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.armed {
		s.faults.Disarm(p)
	}
	clear(s.armed)
}

// Counts reports no deaths at fault points: in this process an armed point fails its write.
func (s *inProcess) Counts() (died, kills int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return 0, s.kills
}

func (s *inProcess) Alive() error { return nil }

func (s *inProcess) Kill(ctx context.Context, role string) error {
	s.mu.Lock()
	old := s.services[role]
	delete(s.services, role)
	s.kills++
	s.mu.Unlock()
	if old != nil {
		old.nc.Close()
		stopWithin(old.stop, 30*time.Second, s.logger, role)
	}
	return s.start(ctx, role)
}

// stopWithin stops a service whose connection was closed under it, giving up (and leaving its
// goroutines, which can write nothing any more) after d.
func stopWithin(stop func() error, d time.Duration, logger *slog.Logger, role string) {
	done := make(chan struct{})
	go func() {
		_ = stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		logger.Warn("torture: a killed service did not stop; left behind", slog.String("role", role))
	}
}

func (s *inProcess) start(ctx context.Context, role string) error {
	nc := s.connect("torture-" + role)
	stop, err := startService(ctx, role, nc, streamsConfig(s.replicas, s.partitions), s.faults, s.logger)
	if err != nil {
		nc.Close()
		return err
	}
	s.mu.Lock()
	s.services[role] = &service{nc: nc, stop: stop}
	s.mu.Unlock()
	return nil
}

// payloadThreshold makes the ingress and the workers offload most payloads (inputs, outputs,
// updates, signals of more than a few fields), so that every sequence meets payload offload.
const payloadThreshold = 48

// startService starts the service of role on connection nc, configured as every torture stack
// configures it, and returns its stop function.
func startService(ctx context.Context, role string, nc *nats.Conn, cfgStreams streams.Config, faults *fault.Injector, logger *slog.Logger) (func() error, error) {
	switch role {
	case RoleHistory:
		h, err := history.New(history.Config{Conn: nc, HTTPAddr: "off", AckWait: historyAckWait, Streams: cfgStreams,
			Logger: logger, Faults: faults, Retention: defaultRetention, RetentionSweep: retentionSweep})
		if err != nil {
			return nil, err
		}
		return h.Stop, h.Start(ctx)
	case RoleIngress:
		// Eager start on: the workers' offers meet every other feature here.
		in, err := ingress.New(ingress.Config{Conn: nc, HTTPAddr: "off", Streams: cfgStreams, Logger: logger, Faults: faults,
			PayloadThreshold: payloadThreshold, EagerStart: true})
		if err != nil {
			return nil, err
		}
		return in.Stop, in.Start(ctx)
	case RoleScheduler:
		sc, err := scheduler.New(scheduler.Config{Conn: nc, Name: schedulerName, HTTPAddr: "off", Streams: cfgStreams,
			Logger: logger, Faults: faults, SchedulePoll: schedulePoll})
		if err != nil {
			return nil, err
		}
		return sc.Stop, sc.Start(ctx)
	case RoleWorker:
		w, err := worker.New(worker.Config{Conn: nc, HTTPAddr: "off", AckWait: workerAckWait, Streams: cfgStreams,
			Logger: logger, Faults: faults, PayloadThreshold: payloadThreshold}, NewRegistry(logger))
		if err != nil {
			return nil, err
		}
		return func() error { return w.Stop(context.Background()) }, w.Start(ctx)
	}
	return nil, fmt.Errorf("unknown role %q", role)
}

func (s *inProcess) stopAll() {
	s.DisarmAll()
	s.mu.Lock()
	svcs := s.services
	s.services = map[string]*service{}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for role, sv := range svcs {
		wg.Go(func() {
			stopWithin(sv.stop, 30*time.Second, s.logger, role)
			sv.nc.Close()
		})
	}
	wg.Wait()
}
