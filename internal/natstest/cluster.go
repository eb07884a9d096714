package natstest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natsserver"
)

// clusterTimeout bounds each wait of RunCluster (formation, streams), StreamLeader and
// WaitForDirectGets. RunCluster takes about a second on an idle machine; under the whole
// suite's load, creating Flow's R3 streams (a raft group and an election each, in one process
// under -race) takes tens of seconds.
const clusterTimeout = 90 * time.Second

// clusters numbers the clusters of this process, so their names and server names are unique.
var clusters atomic.Int64

// Cluster is a JetStream cluster of embedded servers in the test process, on loopback.
type Cluster struct {
	servers []*natsserver.Server
	names   []string
	urls    []string
	account string
}

// RunCluster starts a JetStream cluster of n servers (2 or 3) for the test, with Flow's streams
// and buckets created at n replicas, and returns once every server follows one meta leader and
// every stream has a leader that reports n-1 current replicas. A replica is current when it has
// stored every committed message; it may not have applied the last ones yet (see
// TestFollowerReadsCanLag in jsstore). The servers shut down on cleanup.
//
// Every server has its own store under t.TempDir(), a free client port and a free cluster port
// on 127.0.0.1, and a name unique in the process. The servers start one after another, each
// routed to those before it (the first to itself), so every route is dialed once, to a server
// that listens, and the cluster is fully meshed as soon as the last one is up. Each server then
// expects a meta group of two, and the first two to exchange votes elect the leader. Were every
// server given every route, each would wait for a vote from all n before electing, on a fresh
// cluster, and a vote request sent before the last route came up would stall the election for an
// election timeout (4 to 9 seconds). With more than three servers, an expected group of two
// would no longer be a majority, so n is at most 3.
func RunCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return RunClusterWith(t, n, 1)
}

// RunClusterWith is RunCluster with the history spread over partitions streams (its leaders
// wherever the meta leader placed them).
func RunClusterWith(t testing.TB, n, partitions int) *Cluster {
	t.Helper()
	if n < 2 || n > 3 {
		t.Fatalf("natstest: RunCluster: n must be 2 or 3, got %d", n)
	}
	var c *Cluster
	var err error
	// The first server's cluster port is reserved and released before the server binds it, so
	// another listener may take it in between: then start over on another port.
	for attempt := 0; ; attempt++ {
		c, err = startCluster(t, n)
		if err == nil {
			break
		}
		if attempt == 2 {
			t.Fatalf("natstest: RunCluster: %v", err)
		}
		t.Logf("natstest: RunCluster: %v; starting over", err)
	}
	t.Cleanup(c.shutdown)

	c.waitFor(t, "meta leader followed by every server", c.metaReady)
	js := make([]jetstream.JetStream, n)
	for i := range n {
		js[i] = c.JetStream(t, i)
	}
	c.waitFor(t, "JetStream API on every server", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		for i := range js {
			if _, err := js[i].AccountInfo(ctx); err != nil {
				return fmt.Errorf("server %d: account info: %w", i, err)
			}
		}
		return nil
	})
	// Ensure is idempotent: retry it while the fresh cluster turns requests away.
	cfg := streams.Config{Replicas: n, Partitions: partitions}
	c.waitFor(t, "Flow's streams", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := ensureConcurrently(ctx, js[0], cfg); err != nil {
			return err
		}
		return streams.Ensure(ctx, js[0], cfg)
	})
	names := append(streams.NewLayout(partitions).Streams(), streams.Tasks)
	for _, b := range []string{streams.TimersBucket, streams.HooksBucket, streams.RunsBucket, streams.DefinitionsBucket, streams.LeasesBucket} {
		names = append(names, "KV_"+b)
	}
	c.waitFor(t, "leader and current replicas of every stream", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		for _, name := range names {
			if err := c.streamReady(ctx, js[0], name); err != nil {
				return err
			}
		}
		return nil
	})
	return c
}

// startCluster starts n servers one after another, each routed to the ones before it, and waits
// until each accepts connections.
func startCluster(t testing.TB, n int) (*Cluster, error) {
	first, err := freePort()
	if err != nil {
		return nil, err
	}
	clusterName := fmt.Sprintf("flowtest-%d", clusters.Add(1))
	c := &Cluster{}
	routes := []string{routeURL(first)}
	for i := range n {
		name := fmt.Sprintf("%s-%d", clusterName, i)
		cfg := natsserver.Config{
			Dir: t.TempDir(), Host: "127.0.0.1", Port: -1, Name: name,
			ClusterName: clusterName, ClusterHost: "127.0.0.1", ClusterPort: -1, Routes: slices.Clone(routes),
			Logger: Logger().With(slog.String("server", name)),
		}
		if i == 0 {
			cfg.ClusterPort = first
		}
		srv, err := natsserver.Start(cfg)
		if err != nil {
			c.shutdown()
			return nil, fmt.Errorf("server %d: %w", i, err)
		}
		c.servers = append(c.servers, srv)
		c.names = append(c.names, name)
		c.urls = append(c.urls, srv.ClientURL())
		if i > 0 {
			routes = append(routes, routeURL(srv.NATS().ClusterAddr().Port))
		}
	}
	c.account = c.servers[0].NATS().GlobalAccount().Name
	return c, nil
}

func routeURL(port int) string { return fmt.Sprintf("nats-route://127.0.0.1:%d", port) }

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("reserving a cluster port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// shutdown stops the servers concurrently and waits until they have.
func (c *Cluster) shutdown() {
	var wg sync.WaitGroup
	for _, s := range c.servers {
		if s != nil {
			wg.Go(s.Shutdown)
		}
	}
	wg.Wait()
}

// waitFor polls cond until it returns nil, failing the test with its last error after
// clusterTimeout.
func (c *Cluster) waitFor(t testing.TB, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: cluster: no %s within %s: %v", what, clusterTimeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metaReady reports whether exactly one server leads the meta group, every server's meta state
// is current, and the leader has JetStream statistics of every server (it places replicas on
// servers it has them of).
func (c *Cluster) metaReady() error {
	leader := -1
	for i, s := range c.servers {
		ns := s.NATS()
		if !ns.JetStreamIsClustered() {
			return fmt.Errorf("server %d: JetStream is not clustered yet", i)
		}
		if !ns.JetStreamIsCurrent() {
			return fmt.Errorf("server %d: meta group not current", i)
		}
		if ns.JetStreamIsLeader() {
			if leader >= 0 {
				return fmt.Errorf("servers %d and %d both lead the meta group", leader, i)
			}
			leader = i
		}
	}
	if leader < 0 {
		return errors.New("no meta leader")
	}
	if peers := c.servers[leader].NATS().JetStreamClusterPeers(); len(peers) != len(c.servers) {
		return fmt.Errorf("meta leader %d knows %d of %d JetStream servers: %v", leader, len(peers), len(c.servers), peers)
	}
	return nil
}

// streamReady reports whether exactly one server leads stream name and reports the other n-1
// as current replicas.
func (c *Cluster) streamReady(ctx context.Context, js jetstream.JetStream, name string) error {
	leader, err := c.streamLeader(name)
	if err != nil {
		return err
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("stream %s: info: %w", name, err)
	}
	ci := st.CachedInfo().Cluster
	if ci == nil || ci.Leader != c.names[leader] {
		return fmt.Errorf("stream %s: info reports leader %+v, not server %d", name, ci, leader)
	}
	current := 0
	for _, r := range ci.Replicas {
		if r.Current && !r.Offline {
			current++
		}
	}
	if current != len(c.servers)-1 {
		return fmt.Errorf("stream %s: leader %s reports %d of %d replicas current", name, ci.Leader, current, len(c.servers)-1)
	}
	return nil
}

// streamLeader returns the index of the one server leading stream name.
func (c *Cluster) streamLeader(name string) (int, error) {
	leader := -1
	for i, s := range c.servers {
		if s.NATS().JetStreamIsStreamLeader(c.account, name) {
			if leader >= 0 {
				return 0, fmt.Errorf("stream %s: servers %d and %d both lead it", name, leader, i)
			}
			leader = i
		}
	}
	if leader < 0 {
		return 0, fmt.Errorf("stream %s: no leader", name)
	}
	return leader, nil
}

// StreamLeader returns the index of the server leading stream (a KV bucket's stream is
// "KV_<bucket>"), waiting while it is being elected.
func (c *Cluster) StreamLeader(t testing.TB, stream string) int {
	t.Helper()
	leader := -1
	c.waitFor(t, "leader of stream "+stream, func() error {
		var err error
		leader, err = c.streamLeader(stream)
		return err
	})
	return leader
}

// DirectGets reports whether server i answers direct gets of stream (ADR-31), that is whether its
// replica has joined the stream's queue group of direct-get responders, and how many requests it
// has been handed. NATS hands a client's request to any member of the group, whichever server the
// client is connected to, so a direct get may be answered by a follower that has not yet applied
// the last commits.
func (c *Cluster) DirectGets(i int, stream string) (member bool, requests int64) {
	// The group has two subjects: batched gets by sequence, and the last message of a subject.
	for _, subject := range []string{"$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".x"} {
		sz, err := c.servers[i].NATS().Subsz(&server.SubszOptions{Subscriptions: true, Account: c.account, Test: subject})
		if err != nil {
			return false, 0
		}
		for _, sub := range sz.Subs {
			if sub.Queue != "" {
				member = true
				requests += sub.Msgs
			}
		}
	}
	return member, requests
}

// WaitForDirectGets waits until every server answers direct gets of stream, which must allow
// them. The leader does from the start; a follower joins on a 2-second tick once it has caught
// up, so up to about 2 seconds after RunCluster returns. Until then the leader answers them all.
func (c *Cluster) WaitForDirectGets(t testing.TB, stream string) {
	t.Helper()
	c.waitFor(t, "direct gets of "+stream+" answered by every server", func() error {
		for i := range c.servers {
			if member, _ := c.DirectGets(i, stream); !member {
				return fmt.Errorf("server %d does not answer direct gets of %s", i, stream)
			}
		}
		return nil
	})
}

// Len returns the number of servers.
func (c *Cluster) Len() int { return len(c.servers) }

// Servers returns the servers, indexed as Connect, URL and StreamLeader index them.
func (c *Cluster) Servers() []*natsserver.Server {
	return append([]*natsserver.Server(nil), c.servers...)
}

// Server returns server i.
func (c *Cluster) Server(i int) *natsserver.Server { return c.servers[i] }

// Name returns the server name of server i.
func (c *Cluster) Name(i int) string { return c.names[i] }

// URL returns the client URL of server i.
func (c *Cluster) URL(i int) string { return c.urls[i] }

// URLs returns every server's client URL, comma-separated, for nats.Connect.
func (c *Cluster) URLs() string { return strings.Join(c.urls, ",") }

// Connect returns a connection to server i only: it ignores the other servers the cluster
// announces, so it never moves to another server. It is closed on cleanup.
func (c *Cluster) Connect(t testing.TB, i int) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.urls[i], natsconn.SyncQueue, nats.IgnoreDiscoveredServers())
	if err != nil {
		t.Fatalf("natstest: connecting to server %d: %v", i, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on a new connection to server i only.
func (c *Cluster) JetStream(t testing.TB, i int) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(c.Connect(t, i))
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return js
}

// ensureConcurrently runs streams.Ensure with the creations it asks for made concurrently, so
// the seven streams elect their leaders at once rather than one after another (about 60ms each):
// this halves the median time of RunCluster. Now and then a follower then creates its replica
// after the leader's first messages and catches up on the leader's next heartbeat, a second
// later. Ensure discards what CreateStream and CreateKeyValue return, which lets them return
// before the stream exists; a later read of a stream created so waits for the creations (Ensure
// reads the buckets it created again once it has asked for every creation, to turn their
// rollups off); RunCluster calls the plain Ensure afterwards, which finds every stream in place
// or fails.
func ensureConcurrently(ctx context.Context, js jetstream.JetStream, cfg streams.Config) error {
	p := &concurrentCreates{JetStream: js}
	err := streams.Ensure(ctx, p, cfg)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(append(p.errs, err)...)
}

type concurrentCreates struct {
	jetstream.JetStream
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    []error
	created map[string]bool // the streams whose creation was asked for
}

func (p *concurrentCreates) creating(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.created == nil {
		p.created = map[string]bool{}
	}
	p.created[name] = true
}

// Stream waits for the creations asked for so far before it reads a stream created so. (Ensure
// calls every method from one goroutine.)
func (p *concurrentCreates) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	p.mu.Lock()
	created := p.created[name]
	p.mu.Unlock()
	if created {
		p.wg.Wait()
	}
	return p.JetStream.Stream(ctx, name)
}

func (p *concurrentCreates) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	p.creating(cfg.Name)
	p.wg.Go(func() {
		_, err := p.JetStream.CreateStream(ctx, cfg)
		p.fail(err)
	})
	return nil, nil
}

func (p *concurrentCreates) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	p.creating("KV_" + cfg.Bucket)
	p.wg.Go(func() {
		_, err := p.JetStream.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			err = nil // as Ensure does
		}
		p.fail(err)
	})
	return nil, nil
}

func (p *concurrentCreates) fail(err error) {
	if err != nil {
		p.mu.Lock()
		p.errs = append(p.errs, err)
		p.mu.Unlock()
	}
}
