// Package natsserver runs a real nats-server with JetStream inside the Flow process: the
// embedded default of `flow dev`, and of tests. It is the same server as a standalone one, with
// file storage on local disk; a cluster is formed by giving routes.
package natsserver

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
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
	// Logger receives the server's log. Defaults to discarding all but warnings and errors of
	// slog.Default().
	Logger *slog.Logger `ignored:"true"`
	// ReadyTimeout bounds the wait for the server to accept connections. Defaults to 10s.
	ReadyTimeout time.Duration `envconfig:"READY_TIMEOUT"`
}

// Server is a running embedded nats-server.
type Server struct {
	ns       *server.Server
	noListen bool
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
	ns.Start()
	timeout := cfg.ReadyTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	if !ns.ReadyForConnections(timeout) {
		ns.Shutdown()
		if !opts.DontListen {
			return nil, fmt.Errorf("nats-server did not become ready within %s; is %s:%d already in use (another `flow dev`)? Stop it or choose another port", timeout, opts.Host, opts.Port)
		}
		return nil, fmt.Errorf("nats-server did not become ready within %s", timeout)
	}
	return &Server{ns: ns, noListen: opts.DontListen}, nil
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

// Shutdown stops the server and waits until it has.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
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
