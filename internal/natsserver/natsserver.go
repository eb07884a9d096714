// Package natsserver runs a real nats-server with JetStream inside the Flow process: the
// embedded default of `flow dev`, and of tests. It is the same server as a standalone one, with
// file storage on local disk; a cluster is formed by giving routes.
package natsserver

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/natsconn"
)

// Config configures an embedded server. The zero value starts a single server listening on
// 127.0.0.1:4222 with its store under ./.flow/nats.
type Config struct {
	// Dir is the JetStream store directory. Defaults to ".flow/nats".
	Dir string `envconfig:"DIR"`
	// Host is the client listen address. Defaults to "127.0.0.1".
	Host string `envconfig:"HOST"`
	// Port is the client port; -1 picks a free one. Defaults to 4222.
	Port int `envconfig:"PORT"`
	// NoListen accepts in-process connections only (Server.Connect). Defaults to false.
	NoListen bool `envconfig:"NO_LISTEN"`
	// Name is the server name, unique within a cluster. Defaults to "flow".
	Name string `envconfig:"NAME"`
	// Sync is how often JetStream fsyncs: "" for the server default (every 2 minutes; an
	// acknowledged write is in the page cache and survives a process crash, not a machine crash
	// before the next sync), "always" (fsync before acknowledging every write: survives machine
	// crashes; raw appends are 12-35x slower on one node, a 10-step workflow about 3x), or a
	// duration such as "10s". Defaults to "".
	Sync string `envconfig:"SYNC"`
	// ClusterName, ClusterHost, ClusterPort and Routes form a cluster; without Routes the server
	// runs alone. ClusterPort -1 picks a free port.
	ClusterName string   `envconfig:"CLUSTER_NAME"`
	ClusterHost string   `envconfig:"CLUSTER_HOST"`
	ClusterPort int      `envconfig:"CLUSTER_PORT"`
	Routes      []string `envconfig:"ROUTES"`
	// MaxConns caps the server's client connections (nats-server's max_connections), so that
	// clients cannot take the file handles JetStream needs (files.go). Defaults to 1024
	// (DefaultMaxConns).
	MaxConns int `envconfig:"MAX_CONNS"`
	// ReservedFiles is the file handles the rest of the process may hold, its HTTP servers'
	// connection caps, counted in the file budget that Start checks (files.go). Defaults to
	// DefaultReservedFiles.
	ReservedFiles int `ignored:"true"`
	// Logger receives the server's log. Defaults to discarding all but warnings and errors of
	// slog.Default().
	Logger *slog.Logger `ignored:"true"`
	// ReadyTimeout bounds the wait for the server to accept connections. Defaults to 10s.
	ReadyTimeout time.Duration `envconfig:"READY_TIMEOUT"`
	// ShutdownTimeout bounds the wait of Shutdown for the server to stop. Defaults to 10s.
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT"`
}

// DefaultShutdownTimeout is the bound of Shutdown when Config.ShutdownTimeout is zero.
const DefaultShutdownTimeout = 10 * time.Second

// ErrShutdownTimeout is wrapped by the error of ShutdownWithin when the server has not stopped
// within the bound.
var ErrShutdownTimeout = errors.New("nats-server did not stop")

// Server is a running embedded nats-server.
type Server struct {
	ns              *server.Server
	noListen        bool
	logger          *slog.Logger
	shutdownTimeout time.Duration

	stopOnce sync.Once
	returned chan struct{} // closed when ns.Shutdown has returned
	stopped  chan struct{} // closed when the server has stopped (WaitForShutdown returned)
}

// Start starts a server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	opts, err := options(cfg)
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("starting nats-server: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	ns.SetLoggerV2(&slogAdapter{l: logger.With(slog.String("component", "nats-server"))}, false, false, false)
	reserved := cfg.ReservedFiles
	if reserved == 0 {
		reserved = DefaultReservedFiles
	}
	checkFiles(logger, opts.MaxConn, reserved)
	s := &Server{ns: ns, noListen: opts.DontListen, logger: logger, shutdownTimeout: cfg.ShutdownTimeout,
		returned: make(chan struct{}), stopped: make(chan struct{})}
	if s.shutdownTimeout <= 0 {
		s.shutdownTimeout = DefaultShutdownTimeout
	}
	ns.Start()
	timeout := cfg.ReadyTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	if !ns.ReadyForConnections(timeout) {
		var err error
		if !opts.DontListen {
			err = fmt.Errorf("nats-server did not become ready within %s; is %s:%d already in use (another `flow dev`)? Stop it or choose another port", timeout, opts.Host, opts.Port)
		} else {
			err = fmt.Errorf("nats-server did not become ready within %s", timeout)
		}
		return nil, errors.Join(err, s.ShutdownWithin(s.shutdownTimeout))
	}
	return s, nil
}

func options(cfg Config) (*server.Options, error) {
	dir := cfg.Dir
	if dir == "" {
		dir = ".flow/nats"
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = 4222
	}
	name := cfg.Name
	if name == "" {
		name = "flow"
	}
	opts := &server.Options{
		ServerName: name,
		Host:       host,
		Port:       port,
		DontListen: cfg.NoListen,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		// Flow's messages are small, but a commit of a large batch or a big step output must fit.
		MaxPayload: 8 << 20,
		MaxConn:    cfg.MaxConns,
	}
	if opts.MaxConn == 0 {
		opts.MaxConn = DefaultMaxConns
	}
	if opts.MaxConn < 0 {
		return nil, fmt.Errorf("natsserver: MaxConns must be positive, got %d", cfg.MaxConns)
	}
	switch s := strings.TrimSpace(cfg.Sync); s {
	case "":
	case "always":
		opts.SyncAlways = true
	default:
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf(`natsserver: Sync must be "", "always" or a positive duration such as "10s", got %q`, s)
		}
		opts.SyncInterval = d
	}
	if len(cfg.Routes) > 0 || cfg.ClusterPort != 0 {
		clusterName := cfg.ClusterName
		if clusterName == "" {
			clusterName = "flow"
		}
		opts.Cluster = server.ClusterOpts{Name: clusterName, Host: cfg.ClusterHost, Port: cfg.ClusterPort}
		if opts.Cluster.Host == "" {
			opts.Cluster.Host = "0.0.0.0"
		}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("natsserver: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	return opts, nil
}

// ClientURL returns the URL clients connect to, or "" when the server does not listen.
func (s *Server) ClientURL() string {
	if s.noListen {
		return ""
	}
	return s.ns.ClientURL()
}

// Connect returns a connection to the server, in process (without the network) when possible.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(s.ns), natsconn.SyncQueue}, opts...)
	return nats.Connect("", opts...)
}

// Shutdown stops the server, waiting for it at most Config.ShutdownTimeout (default
// DefaultShutdownTimeout). If the server has not stopped by then, Shutdown logs the error of
// ShutdownWithin and returns anyway, so that the caller can exit; see ShutdownWithin.
func (s *Server) Shutdown() {
	if err := s.ShutdownWithin(s.shutdownTimeout); err != nil {
		s.logger.Error("nats-server did not stop; giving up waiting for it", slog.String("component", "natsserver"),
			slog.String("error", err.Error()))
	}
}

// ShutdownWithin stops the server and waits at most timeout (DefaultShutdownTimeout when
// timeout <= 0) for it to stop. It returns nil once the server has stopped: clients are
// disconnected and JetStream has flushed and closed its store.
//
// The server's own Shutdown is not bounded: a JetStream stream stuck holding its lock (as
// nats-server v2.15.2 does on some damaged message blocks, looping forever in
// fileStore.storeRawMsg) blocks it for good. So the stop runs in a goroutine, and after timeout
// ShutdownWithin returns an error wrapping ErrShutdownTimeout that says which step has not
// finished and which nats-server goroutines are busy. The server is then left stopping in the
// background, possibly never finishing (a goroutine may keep spinning): its store may be open
// and half flushed, and it must not be used or started again on the same directory in this
// process. The caller should exit the process; JetStream recovers the directory on the next
// start.
//
// It is safe to call more than once, also concurrently and together with Shutdown: the server
// is stopped once and each call waits with its own timeout.
func (s *Server) ShutdownWithin(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}
	s.stopOnce.Do(func() { go s.stop() })
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.stopped:
		return nil
	case <-t.C:
	}
	select {
	case <-s.stopped:
		return nil
	case <-s.returned:
		return fmt.Errorf("natsserver: %w within %s: it is still closing its stores or connections%s", ErrShutdownTimeout, timeout, busyGoroutines())
	default:
		return fmt.Errorf("natsserver: %w within %s: server.Shutdown has not returned%s%s", ErrShutdownTimeout, timeout, stopStack(), busyGoroutines())
	}
}

// stop runs the server's unbounded shutdown; ShutdownWithin waits for it with a bound.
func (s *Server) stop() {
	s.ns.Shutdown()
	close(s.returned)
	s.ns.WaitForShutdown()
	close(s.stopped)
}

// NATS returns the underlying server.
func (s *Server) NATS() *server.Server { return s.ns }

// slogAdapter routes nats-server logs to slog: notices at Debug (they are verbose), warnings
// and errors as such.
type slogAdapter struct{ l *slog.Logger }

func (a *slogAdapter) Noticef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }

// A goroutine of a runtime.Stack dump: its id, its state and its first frames, each as
// "function file:line".
type goroutine struct {
	id, state string
	frames    []string
}

// goroutines parses the stack dump of all goroutines.
func goroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= 64<<20 {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []goroutine
	for _, block := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		head, ok := strings.CutPrefix(lines[0], "goroutine ")
		if !ok {
			continue
		}
		g := goroutine{id: strings.Fields(head)[0]}
		if i, j := strings.Index(head, "["), strings.Index(head, "]"); i >= 0 && j > i {
			g.state, _, _ = strings.Cut(head[i+1:j], ",")
		}
		for i := 1; i+1 < len(lines); i += 2 {
			fn := lines[i]
			if strings.HasPrefix(fn, "created by ") {
				break
			}
			if k := strings.LastIndex(fn, "("); k > 0 {
				fn = fn[:k]
			}
			fn = strings.TrimPrefix(fn, "github.com/nats-io/nats-server/v2/")
			file, _, _ := strings.Cut(strings.TrimSpace(lines[i+1]), " ")
			g.frames = append(g.frames, fn+" "+filepath.Base(file))
		}
		gs = append(gs, g)
	}
	return gs
}

// inServer reports whether frame is a function of nats-server.
func inServer(frame string) bool {
	return strings.HasPrefix(frame, "server.") || strings.HasPrefix(frame, "server/")
}

// serverFrames returns the first n frames of g inside nats-server.
func serverFrames(g goroutine, n int) []string {
	var fs []string
	for _, f := range g.frames {
		if inServer(f) && len(fs) < n {
			fs = append(fs, f)
		}
	}
	return fs
}

// stopStack says where the goroutine running server.Shutdown waits.
func stopStack() string {
	for _, g := range goroutines() {
		for _, f := range g.frames {
			if strings.Contains(f, "natsserver.(*Server).stop ") {
				if fs := serverFrames(g, 1); len(fs) > 0 {
					return fmt.Sprintf(" (it is %s in %s)", g.state, fs[0])
				}
				return fmt.Sprintf(" (it is %s)", g.state)
			}
		}
	}
	return ""
}

// busyGoroutines lists the nats-server goroutines that are running or runnable rather than
// waiting: a goroutine stuck in a loop, holding what the shutdown waits for, is among them.
func busyGoroutines() string {
	var busy []string
	for _, g := range goroutines() {
		if g.state != "running" && g.state != "runnable" {
			continue
		}
		if fs := serverFrames(g, 4); len(fs) > 0 && len(busy) < 5 {
			busy = append(busy, fmt.Sprintf("goroutine %s [%s] %s", g.id, g.state, strings.Join(fs, " < ")))
		}
	}
	if len(busy) == 0 {
		return ""
	}
	return "; busy nats-server goroutines: " + strings.Join(busy, "; ")
}
