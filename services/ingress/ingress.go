// Package ingress is Flow's door for inputs from outside: starts, signals, hook deliveries,
// cancellations and terminations, over NATS request/reply (CloudEvents or plain JSON) and HTTP
// (JSON, or CloudEvents in binary or structured mode), with bearer-token authentication on
// HTTP. See package internal/api for the subjects, routes and wire types.
//
// Every input is committed to the run's history before it is acknowledged: an acknowledged
// input is never lost, whatever process dies after. A retried delivery (the same CloudEvents id
// or Idempotency-Key) is applied once; a delivery ID reused with another payload is refused
// with a conflict. Input that cannot be accepted is refused with an error that says what was
// wrong and what to do, and nothing is appended.
//
// Any number of replicas may run: they share the NATS subjects in a queue group, and writers
// converge on a run's history by optimistic concurrency.
package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/httpserve"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natsconn"
)

// Config configures the ingress service. The zero value works: it connects to
// nats://127.0.0.1:4222 and serves HTTP on 127.0.0.1:8421 without authentication. cmd/flowd
// loads it from the environment with envconfig.Process("FLOW", &cfg).
type Config struct {
	// NATS says how to connect when Conn is nil: servers, credentials, TLS, or a nats CLI
	// context (FLOW_NATS_URL, FLOW_NATS_CREDS, ..., or the nats CLI's NATS_URL; see
	// natsconn.Config and docs/operations.md). Defaults to nats://127.0.0.1:4222.
	NATS natsconn.Config `envconfig:"NATS"`
	// Conn is an existing connection to use instead of dialling with NATS. The service does not
	// close it.
	Conn *nats.Conn `ignored:"true"`
	// HTTPAddr is the HTTP listen address host:port, or "off". Defaults to 127.0.0.1:8421.
	HTTPAddr string `envconfig:"INGRESS_HTTP_ADDR"`
	// PublicURL is the base URL under which third parties reach the HTTP routes, for hook
	// callback URLs (PublicURL + "/v1/hooks/" + token). Defaults to "http://" + HTTPAddr.
	PublicURL string `envconfig:"INGRESS_PUBLIC_URL"`
	// Tokens are the bearer tokens accepted on every HTTP route but hook callbacks
	// (comma-separated in FLOW_INGRESS_TOKENS). Defaults to none.
	Tokens []string `envconfig:"INGRESS_TOKENS"`
	// TokensFile names a file of bearer tokens, one per line ('#' starts a comment), such as a
	// mounted secret; it is read again when it changes. Defaults to none.
	TokensFile string `envconfig:"INGRESS_TOKENS_FILE"`
	// AllowAnonymous serves HTTP on a non-loopback address without any bearer token. Defaults
	// to false: without tokens, the service only listens on loopback addresses.
	AllowAnonymous bool `envconfig:"INGRESS_ALLOW_ANONYMOUS"`
	// AllowedOrigins are the web origins (scheme://host[:port], comma-separated in
	// FLOW_INGRESS_ALLOWED_ORIGINS) whose pages may send requests that change something, such as
	// an operator's console; every other cross-site request is refused (docs/ingress.md,
	// "Browsers"). Defaults to none.
	AllowedOrigins []string `envconfig:"INGRESS_ALLOWED_ORIGINS"`
	// HTTP bounds the HTTP server's connections and the time a request may take to arrive, be
	// answered or idle (FLOW_INGRESS_HTTP_MAX_CONNS, _READ_HEADER_TIMEOUT, _READ_TIMEOUT,
	// _WRITE_TIMEOUT, _IDLE_TIMEOUT, _MAX_HEADER_BYTES; see httpserve.Config). Defaults to 1024
	// connections, 10 s for the headers, 30 s for the whole request, 45 s for the answer (long
	// polls take theirs: ?wait= plus 45 s), 60 s idle, 64 KiB of headers.
	HTTP httpserve.Config `envconfig:"INGRESS_HTTP"`
	// MaxBodyBytes bounds a request body or message. Defaults to 1 MiB.
	MaxBodyBytes int64 `envconfig:"INGRESS_MAX_BODY_BYTES"`
	// Concurrency bounds the NATS inputs applied at once. Defaults to 256.
	Concurrency int `envconfig:"INGRESS_CONCURRENCY"`
	// Queue is the task queue of starts that name none. Defaults to "default" (FLOW_QUEUE).
	Queue string `envconfig:"QUEUE"`
	// Streams sizes Flow's streams, created or updated at start.
	Streams streams.Config `envconfig:"STREAMS"`
	// Logger defaults to slog.Default().
	Logger *slog.Logger `ignored:"true"`
	// Faults injects failures between writes, for tests (fault.IngressBeforeReply: an input is
	// committed and its answer is lost, as when the process dies there). Defaults to nil (none).
	Faults *fault.Injector `ignored:"true"`
	// PayloadThreshold is the size in bytes above which an input's payload (a start's input,
	// a signal's, a hook delivery's, an update's) is offloaded to the FLOW_PAYLOADS object
	// store, the history holding a reference (docs/large-payloads.md). Defaults to 256 KiB.
	PayloadThreshold int `envconfig:"PAYLOAD_THRESHOLD"`

	// The limits below are this process's (docs/ingress.md, "Limits"): with n replicas, a run or
	// sender may get up to n times the rates through all of them.

	// RunRate bounds the inputs per second to one run (signals, hook deliveries, updates,
	// cancels, terminations, pauses; not starts), as a token bucket refilled at RunRate and
	// holding RunBurst: past it, inputs are refused with 429 rate_limited and Retry-After.
	// Defaults to 100; negative for no limit.
	RunRate float64 `envconfig:"INGRESS_RUN_RATE"`
	// RunBurst is the inputs one run takes at once before RunRate holds. Defaults to twice
	// RunRate.
	RunBurst int `envconfig:"INGRESS_RUN_BURST"`
	// SourceRate bounds the inputs per second from one sender, every kind: on HTTP a bearer
	// token, or the remote address without one; on NATS the requester's connection (its reply
	// inbox). Past it, inputs are refused with 429 rate_limited and Retry-After. Defaults to
	// 2,000; negative for no limit.
	SourceRate float64 `envconfig:"INGRESS_SOURCE_RATE"`
	// SourceBurst is the inputs one sender sends at once before SourceRate holds. Defaults to
	// twice SourceRate.
	SourceBurst int `envconfig:"INGRESS_SOURCE_BURST"`
	// MaxPendingInputs bounds the inputs a run holds that its workflow has not taken yet
	// (signals no signal wait consumed, updates not yet accepted or rejected): past it, a
	// signal or update is refused with 429 too_many_pending. Defaults to 10,000; negative for
	// no bound.
	MaxPendingInputs int `envconfig:"INGRESS_MAX_PENDING_INPUTS"`
	// MaxPendingBytes bounds the bytes of those inputs' payloads as the history holds them, as
	// MaxPendingInputs bounds their number. Defaults to 4 MiB; negative for no bound.
	MaxPendingBytes int64 `envconfig:"INGRESS_MAX_PENDING_BYTES"`
	// CacheSize bounds the runs whose snapshots the ingress keeps between inputs, so that the
	// next input to a run reads only the events after its snapshot. Defaults to 1,000;
	// negative for none.
	CacheSize int `envconfig:"INGRESS_CACHE_SIZE"`
	// EagerStart offers each new run to a live worker of its queue before queueing its first
	// task (eager start: a worker with a free run slot takes the run and drives it at once;
	// docs/execution-model.md). Defaults to false: measured, it made no run faster on one
	// server, where a task reaches a waiting worker as fast as an offer (docs/performance.md).
	EagerStart bool `envconfig:"INGRESS_EAGER_START"`
}

// DefaultHTTPAddr is where the HTTP routes listen unless Config.HTTPAddr says otherwise.
const DefaultHTTPAddr = "127.0.0.1:8421"

// DefaultMaxBodyBytes bounds bodies unless Config.MaxBodyBytes says otherwise.
const DefaultMaxBodyBytes = 1 << 20

// Service is the ingress service. Start it once; Stop it once.
type Service struct {
	cfg    Config
	logger *slog.Logger

	nc      *nats.Conn
	ownConn bool
	js      jetstream.JetStream
	engine  *engine.Engine
	host    *jshost.Host
	defs    definitions
	auth    *authenticator

	sub   *nats.Subscription
	slots chan struct{}
	// stopMu guards stopped: once set, no input is taken, and inflight only falls.
	stopMu   sync.RWMutex
	stopped  bool
	inflight sync.WaitGroup
	httpSrv  *http.Server
	httpAddr net.Addr
	// readiness follows Start and Stop, for GET /readyz.
	readiness health.State
	cancel    context.CancelFunc
	once      sync.Once
	// queries asks workers the queries of the HTTP route (query.go).
	queries queryClient
	// batch answers the batch API (batch.go).
	batch batchDoor
	// admission holds the rate limits and the run turns of inputs (ratelimit.go).
	admission *admission
}

// New returns an ingress service, or an error naming the field of cfg that is wrong.
func New(cfg Config) (*Service, error) {
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = DefaultHTTPAddr
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 256
	}
	if cfg.Queue == "" {
		cfg.Queue = streams.DefaultQueue
	}
	cfg.RunRate, cfg.RunBurst = rateDefaults(cfg.RunRate, cfg.RunBurst, DefaultRunRate)
	cfg.SourceRate, cfg.SourceBurst = rateDefaults(cfg.SourceRate, cfg.SourceBurst, DefaultSourceRate)
	if cfg.MaxPendingInputs == 0 {
		cfg.MaxPendingInputs = DefaultMaxPendingInputs
	}
	if cfg.MaxPendingBytes == 0 {
		cfg.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	switch {
	case cfg.MaxBodyBytes < 0:
		return nil, fmt.Errorf("ingress: MaxBodyBytes must be positive, got %d", cfg.MaxBodyBytes)
	case cfg.Concurrency < 0:
		return nil, fmt.Errorf("ingress: Concurrency must be positive, got %d", cfg.Concurrency)
	case cfg.RunBurst < 0 || cfg.SourceBurst < 0:
		return nil, fmt.Errorf("ingress: RunBurst and SourceBurst must not be negative, got %d and %d", cfg.RunBurst, cfg.SourceBurst)
	}
	if err := cfg.HTTP.Validate("FLOW_INGRESS_HTTP_"); err != nil {
		return nil, fmt.Errorf("ingress: %w", err)
	}
	if err := checkAllowedOrigins(cfg.AllowedOrigins); err != nil {
		return nil, err
	}
	if cfg.HTTPAddr != "off" {
		if _, _, err := net.SplitHostPort(cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("ingress: HTTPAddr must be host:port or \"off\", got %q: %w", cfg.HTTPAddr, err)
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	auth, err := newAuthenticator(cfg.Tokens, cfg.TokensFile)
	if err != nil {
		return nil, err
	}
	if cfg.HTTPAddr != "off" && !auth.enabled() && !cfg.AllowAnonymous && !loopback(cfg.HTTPAddr) {
		return nil, fmt.Errorf("ingress: HTTP on %s would accept inputs from anyone: set FLOW_INGRESS_TOKENS (or FLOW_INGRESS_TOKENS_FILE), listen on a loopback address, or set FLOW_INGRESS_ALLOW_ANONYMOUS=true", cfg.HTTPAddr)
	}
	return &Service{cfg: cfg, logger: logger.With(slog.String("component", "ingress")), auth: auth,
		slots: make(chan struct{}, cfg.Concurrency), admission: newAdmission(cfg)}, nil
}

// rateDefaults fills in a rate and burst left zero: the rate def, the burst twice the rate.
func rateDefaults(perSecond float64, burst int, def float64) (float64, int) {
	if perSecond == 0 {
		perSecond = def
	}
	if burst == 0 && perSecond > 0 {
		burst = int(min(2*perSecond, math.MaxInt32))
	}
	return perSecond, burst
}

func loopback(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Start connects, creates Flow's streams if needed, and starts answering on NATS and HTTP. It
// returns once both doors are open.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if s.nc, s.ownConn, err = s.cfg.NATS.As(natsconn.RoleIngress).Use(s.cfg.Conn, "flow-ingress"); err != nil {
		return err
	}
	if err := s.start(ctx); err != nil {
		_ = s.Stop()
		return err
	}
	s.readiness.Started()
	return nil
}

func (s *Service) start(ctx context.Context) error {
	var err error
	if s.js, err = jetstream.New(s.nc); err != nil {
		return err
	}
	if err := streams.Ensure(ctx, s.js, s.cfg.Streams); err != nil {
		return err
	}
	// Dedup and debounce keys: the history service writes them, asked over request/reply.
	keys := jshost.NewRemoteStartKeys(s.nc)
	pauses, err := jshost.NewPauses(ctx, s.js, jshost.PausesOptions{Logger: s.logger})
	if err != nil {
		return err
	}
	// An input to a run not in the cache reads its latest checkpoint and the history after it,
	// not the whole run; one to a cached run reads only the events after its snapshot.
	be, err := backend.Open(ctx, s.js, backend.Role{Source: "flow/ingress", Logger: s.logger, Faults: s.cfg.Faults,
		Payloads: true, PayloadThreshold: s.cfg.PayloadThreshold, Checkpoints: true, Offers: s.cfg.EagerStart},
		engine.Config{CacheSize: s.cfg.CacheSize, Keys: keys, Pauses: pauses,
			Pending: engine.PendingLimits{Count: max(0, s.cfg.MaxPendingInputs), Bytes: max(0, s.cfg.MaxPendingBytes)}})
	if err != nil {
		return err
	}
	s.host, s.engine = be.Host, be.Engine
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	if s.defs, err = newDefinitions(runCtx, s.js, s.logger); err != nil {
		return err
	}
	if s.sub, err = s.nc.QueueSubscribe(api.IngressPrefix+">", api.IngressQueueGroup, s.onMsg); err != nil {
		return fmt.Errorf("subscribing to %s>: %w", api.IngressPrefix, err)
	}
	if err := s.subscribeBatches(); err != nil {
		return err
	}
	if err := s.nc.Flush(); err != nil {
		return err
	}
	if s.cfg.HTTPAddr != "off" {
		if err := s.serveHTTP(); err != nil {
			return err
		}
	}
	if !s.auth.enabled() && s.cfg.HTTPAddr != "off" {
		s.logger.Warn("no bearer tokens configured: the HTTP routes accept inputs from any local program; set FLOW_INGRESS_TOKENS to require one")
	}
	s.logger.InfoContext(ctx, "ingress started", slog.String("http", s.HTTPAddr()), slog.String("nats", api.IngressPrefix+">"))
	return nil
}

// HTTPAddr returns the address the HTTP routes listen on ("" when off or not started).
func (s *Service) HTTPAddr() string {
	if s.httpAddr == nil {
		return ""
	}
	return s.httpAddr.String()
}

// PublicURL returns the base URL of the HTTP routes for third parties: Config.PublicURL, else
// "http://" and the listen address.
func (s *Service) PublicURL() string {
	if s.cfg.PublicURL != "" {
		return s.cfg.PublicURL
	}
	if addr := s.HTTPAddr(); addr != "" {
		return "http://" + addr
	}
	return "http://" + s.cfg.HTTPAddr
}

// Stop stops taking inputs, waits for those being applied (each is either committed and
// acknowledged, or not acknowledged), and closes the connection if the service dialled it.
func (s *Service) Stop() error {
	var err error
	s.once.Do(func() {
		s.readiness.Stopping()
		s.stopMu.Lock()
		s.stopped = true
		s.stopMu.Unlock()
		if s.sub != nil {
			err = s.sub.Unsubscribe()
		}
		if s.batch.sub != nil {
			err = errors.Join(err, s.batch.sub.Unsubscribe())
		}
		if s.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = errors.Join(err, s.httpSrv.Shutdown(ctx))
			cancel()
		}
		s.inflight.Wait()
		if s.defs != nil {
			s.defs.stop()
		}
		if s.cancel != nil {
			s.cancel()
		}
		if s.ownConn && s.nc != nil {
			s.nc.Close()
		}
	})
	return err
}
