// Package history is Flow's history service: the durable consumer of the history stream, and
// the read side.
//
// # The outbox
//
// The history stream is the outbox. Every consequence of a commit is a function of the stream,
// applied by this service from a durable JetStream consumer (explicit acks; a restart resumes at
// the ack floor) and acknowledged only once applied: the resume task of an input no decision
// answered yet (deduplicated by "<run>:<seq>"), the timer index entry of every wait and retry
// (and its removal when moot), the child runs a decision started, the end-of-run work (the
// parent's child.settled, the continue-as-new successor, children cancelled per policy, hook
// tokens released), a reset run's copied hook tokens routed to it, the runs index entry
// (written only when the run's status or detail changes, guarded so that it never moves
// backwards), and the public event feed (one CloudEvent per event on
// flow.events.<definition>.<run>.<type>, see docs/events.md). Writers may do the same work at
// once as a fast path; correctness never depends on it: a crash between any two writes delays a
// run by one redelivery and never loses it.
//
// Several replicas share the consumer. Within a replica a run's commits are applied in order
// (each run hashes to one lane); across replicas every effect is derived from the run's latest
// history and is idempotent, so two replicas applying commits of one run concurrently agree.
//
// # Parking
//
// Workers park runs they cannot drive (pinned to another build, or of a definition they do not
// register) by asking this service, FLOW_PARKED's one writer, to write the entry (doors.go), and
// acknowledge their tasks; blocked runs are parked by their status.
// The service dispatches them again when a worker registers their definition (with a build that
// can drive them), and on `flow resume`.
//
// # Queries
//
// The service answers snapshot (latest, or at any sequence), history page, list (with filters
// and paging) and resume requests over NATS request/reply (a micro service, see package
// internal/api) and HTTP, with watch over server-sent events.
//
// # Damage
//
// At start the service checks the streams it depends on: history lost by a disk or a server
// crash is reported run by run, and those runs are quarantined in FLOW_DAMAGED, which every
// store refuses to serve; a damaged or empty runs index, timer index or task queue is rebuilt
// from history (as `flowd history --rebuild` does on demand).
package history

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowrun/flow/internal/backend"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/definitions"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/health"
	"github.com/flowrun/flow/internal/httpserve"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/liveness"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/parked"
	"github.com/flowrun/flow/internal/runsindex"
	"github.com/flowrun/flow/internal/store/jsstore"
)

// Config configures a Service. The zero value works against a local `flow dev`. Load it from
// the environment with envconfig.Process("FLOW", &cfg): FLOW_NATS_URL, FLOW_HISTORY_HTTP_ADDR...
type Config struct {
	// NATS says how to connect when Conn is nil: servers, credentials, TLS, or a nats CLI
	// context, from FLOW_NATS_URL, FLOW_NATS_CREDS, FLOW_NATS_NKEY, FLOW_NATS_TLS_CA,
	// FLOW_NATS_TLS_CERT, FLOW_NATS_TLS_KEY, FLOW_NATS_CONTEXT and the nats CLI's NATS_URL, ... (see
	// natsconn.Config and docs/operations.md). Defaults to nats://127.0.0.1:4222 when neither
	// the environment nor a nats context says otherwise.
	NATS natsconn.Config `envconfig:"NATS"`
	// Conn is an existing connection to use instead of dialling with NATS. The service does not
	// close it.
	Conn *nats.Conn `ignored:"true"`
	// HTTPAddr is the address of the HTTP API, host:port. Defaults to "127.0.0.1:8420"; "off"
	// disables it; port 0 picks a free one (see Service.HTTPAddr).
	HTTPAddr string `envconfig:"HISTORY_HTTP_ADDR"`
	// HTTP bounds the HTTP API's connections and request times (FLOW_HISTORY_HTTP_MAX_CONNS,
	// _READ_HEADER_TIMEOUT, _READ_TIMEOUT, _WRITE_TIMEOUT, _IDLE_TIMEOUT, _MAX_HEADER_BYTES; see
	// httpserve.Config; the watch stream's writes are each bounded). Defaults to 1024
	// connections, 10 s, 30 s, 45 s, 60 s and 64 KiB.
	HTTP httpserve.Config `envconfig:"HISTORY_HTTP"`
	// Tokens are the bearer tokens that may read and act through the HTTP API and the web UI
	// (comma-separated in FLOW_INGRESS_TOKENS: the ingress's setting, so that the UI's actions,
	// forwarded to the ingress with the caller's token, are accepted there). Defaults to none:
	// without Tokens, TokensFile, ReadTokens and ReadTokensFile the HTTP port asks for no token
	// (docs/operations.md#the-history-services-http-port).
	Tokens []string `envconfig:"INGRESS_TOKENS"`
	// TokensFile names a file of such tokens, one per line ('#' starts a comment), read again
	// when it changes (FLOW_INGRESS_TOKENS_FILE). Defaults to none.
	TokensFile string `envconfig:"INGRESS_TOKENS_FILE"`
	// ReadTokens are bearer tokens that may read (the API's GETs, the UI's pages) but not act nor
	// see a run's secrets (comma-separated in FLOW_READ_TOKENS). Defaults to none.
	ReadTokens []string `envconfig:"READ_TOKENS"`
	// ReadTokensFile names a file of read-only tokens, one per line (FLOW_READ_TOKENS_FILE).
	// Defaults to none.
	ReadTokensFile string `envconfig:"READ_TOKENS_FILE"`
	// AllowedHosts are the host names (or addresses) the HTTP port answers for besides
	// HTTPAddr's host, localhost, 127.0.0.1 and ::1; a request with another Host header gets 421
	// (against DNS rebinding). "*" allows any. Comma-separated in FLOW_HISTORY_ALLOWED_HOSTS.
	// Defaults to none.
	AllowedHosts []string `envconfig:"HISTORY_ALLOWED_HOSTS"`
	// IngressURL is the base URL of the ingress's HTTP API, to which the web UI forwards its
	// actions (signal, cancel, pause, unpause) with the caller's bearer token
	// (FLOW_HISTORY_INGRESS_URL). Defaults to "http://127.0.0.1:8421", the ingress's default
	// address; "off" disables the UI's actions.
	IngressURL string `envconfig:"HISTORY_INGRESS_URL"`
	// IngressURLOf, when set, returns the ingress's base URL as each action is forwarded,
	// instead of IngressURL: for flow dev, whose ingress listens (maybe on a port picked at
	// random) only after the history service started. "" disables the actions.
	IngressURLOf func() string `ignored:"true"`
	// SessionTTL is how long a web UI sign-in lasts (FLOW_HISTORY_SESSION_TTL). Defaults to 12
	// hours.
	SessionTTL time.Duration `envconfig:"HISTORY_SESSION_TTL"`
	// Lanes is how many runs have commits applied at once; each run's commits are applied in
	// order in one lane. Defaults to 16.
	Lanes int `envconfig:"HISTORY_LANES"`
	// AckWait is how long a commit may stay unacknowledged before JetStream hands it to another
	// replica. Defaults to 30 seconds.
	AckWait time.Duration `envconfig:"HISTORY_ACK_WAIT"`
	// CacheSize bounds the runs whose snapshots are kept between commits. Defaults to 10,000.
	CacheSize int `envconfig:"HISTORY_CACHE_SIZE"`
	// Linger is how long the service holds the commit that ends a quiet spell, and waits after
	// each pull that brought commits but not a full batch, gathering what else arrives to apply it
	// together: longer writes less (a run's commits that arrive together write its index entry
	// once) and delays the consequences writers do not carry themselves (the index, the feed,
	// timers, repairs). Defaults to 5 milliseconds; negative pulls each commit as it comes.
	Linger time.Duration `envconfig:"HISTORY_LINGER"`
	// Rebuild rebuilds the runs index, the timer index and the resume tasks of every run from
	// history at start. Defaults to false: they are rebuilt only when found damaged, empty or
	// behind.
	Rebuild bool `envconfig:"HISTORY_REBUILD"`
	// Streams sizes Flow's streams, created or updated at start.
	Streams streams.Config `envconfig:"STREAMS"`
	// Logger defaults to slog.Default().
	Logger *slog.Logger `ignored:"true"`
	// Faults injects failures between writes, for tests. Defaults to nil (none).
	Faults *fault.Injector `ignored:"true"`
	// Retention is how long the history of an ended run is kept after its end when its
	// definition does not say (flow.WithRetention); then the retention sweeper archives and
	// deletes it (docs/retention.md). Defaults to DefaultRetention, 30 days.
	Retention time.Duration `envconfig:"RETENTION"`
	// RetentionSweep is how often the replica holding the retention lease looks for ended runs
	// past their retention. Defaults to 1 minute; negative disables the sweeper.
	RetentionSweep time.Duration `envconfig:"RETENTION_SWEEP"`
	// Archive says where a history is kept before it is deleted: "objectstore" (the FLOW_ARCHIVE
	// Object Store bucket), "dir:/absolute/path" (one file per run), or "off" (deleted without
	// an archive). Defaults to "objectstore".
	Archive string `envconfig:"ARCHIVE"`
	// Clock is the retention sweeper's clock, for tests. Defaults to time.Now.
	Clock func() time.Time `ignored:"true"`
	// ReconcileInterval is how often the replica holding the retention lease recomputes the
	// state the service derives from history (the admission queue, the runs index of active
	// runs, the timer index, the start keys, the checkpoints) and repairs what drifted
	// (docs/derived-state.md), then, on a partitioned history, moves one history stream's
	// leadership to a server that leads fewer (streams.SpreadLeaders). Defaults to 1 minute;
	// negative disables the reconciler.
	ReconcileInterval time.Duration `envconfig:"HISTORY_RECONCILE_INTERVAL"`
	// PayloadGCInterval is how often the replica holding the retention lease deletes the
	// offloaded payloads (FLOW_PAYLOADS) that no retained history refers to
	// (docs/large-payloads.md#collecting-payloads). Defaults to DefaultPayloadGCInterval, 1
	// hour; negative disables the collector.
	PayloadGCInterval time.Duration `envconfig:"PAYLOAD_GC_INTERVAL"`
	// PayloadGCGrace is how long the collector leaves an object after it was last written or
	// touched, whatever refers to it: it bounds how long a writer may take from storing a
	// payload to appending the event that refers to it. Defaults to DefaultPayloadGCGrace, 1
	// hour; at least MinPayloadGCGrace.
	PayloadGCGrace time.Duration `envconfig:"PAYLOAD_GC_GRACE"`
	// CheckpointEvery is the number of events between two snapshot checkpoints of a run (at
	// least; every eighth of a long history), which the service writes as it follows the
	// history, so that a cold load elsewhere reads the latest checkpoint and the history after
	// it only (docs/large-payloads.md). Defaults to 1,000; negative writes none.
	CheckpointEvery int `envconfig:"CHECKPOINT_EVERY"`
}

// DefaultHTTPAddr is where the HTTP API listens unless Config.HTTPAddr says otherwise.
const DefaultHTTPAddr = "127.0.0.1:8420"

// Service is the history service. Start it once; Stop it once.
type Service struct {
	cfg    Config
	logger *slog.Logger

	nc      *nats.Conn
	ownConn bool
	js      jetstream.JetStream
	store   *jsstore.Store
	// layout is how the history is spread over streams: one consumer pulls each.
	layout streams.Layout
	host   *jshost.Host
	engine *engine.Engine
	// keys is the start key index, which the service alone writes (startkeys.go).
	keys    *jshost.StartKeys
	runs    *runsindex.Store
	parked  *parked.Store
	damaged *jsstore.DamagedRuns
	defs    *definitions.Store
	// control keeps the admission queue and releases ended runs' flow-control slots.
	control *control

	index *readModel
	park  *parking
	// live follows the workers and the definitions they serve, for the definitions query.
	live  *liveness.View
	lanes []*lane
	// consuming is set once the lanes run: from then on, work can be queued on them.
	consuming atomic.Bool

	micro micro.Service
	// auth checks the HTTP port's callers (httpauth.go).
	auth     *httpAuth
	httpSrv  *http.Server
	httpAddr net.Addr
	// readiness follows Start and Stop, for GET /readyz.
	readiness health.State

	cancel  context.CancelFunc
	workers sync.WaitGroup
	started chan struct{}
	once    sync.Once
	// indexWritten is the latest revision of FLOW_RUNS this service wrote.
	indexWritten atomic.Uint64
	// beforeIndexApply, when set (by tests), runs before the copy of the runs index applies an
	// entry.
	beforeIndexApply func()
	// awaitsByPoll counts awaits a notice did not answer (AwaitsByPoll).
	awaitsByPoll atomic.Int64
	// awaitPoll is the period of an await's slow poll, which stands in for a lost notice.
	awaitPoll time.Duration
	// beforeAwaitCheck, when set (by tests), runs before each read of an await, with whether the
	// slow poll asked for it.
	beforeAwaitCheck func(runID string, polled bool)
	// applied counts commits applied, for tests and stats.
	applied countingSignal
	// unobserve unregisters the service's observable gauges, once registered.
	unobserve func()
	// updateSnaps holds the projections the update endpoint read, so that a later wait on the
	// same run reads only its tail (await_update.go).
	updateSnaps *snapshotCache
	// retention is the retention sweeper's state (retention.go).
	retention *retention
	// reconciler is the reconciler's state between passes (reconcile.go).
	reconciler reconciler
	// payloadGC is the payload collector's state between passes (payload_gc.go).
	payloadGC payloadGC
	// payloadReads serves the offloaded payloads clients read (payloads.go).
	payloadReads payloadReads
	// hookClaimGrace is how long the reconciler leaves alone a route to a live run that has
	// not committed the hook (reconcile_hooks.go).
	hookClaimGrace time.Duration
}

// New returns a history service.
func New(cfg Config) (*Service, error) {
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = DefaultHTTPAddr
	}
	if cfg.Lanes == 0 {
		cfg.Lanes = 16
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = 10_000
	}
	if cfg.Linger == 0 {
		cfg.Linger = 5 * time.Millisecond
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = time.Minute
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = engine.DefaultCheckpointEvery
	}
	if err := retentionDefaults(&cfg); err != nil {
		return nil, err
	}
	if err := payloadGCDefaults(&cfg); err != nil {
		return nil, err
	}
	switch {
	case cfg.Lanes < 1:
		return nil, fmt.Errorf("history: Lanes must be positive, got %d", cfg.Lanes)
	case cfg.AckWait < time.Second:
		return nil, fmt.Errorf("history: AckWait must be at least 1s, got %s", cfg.AckWait)
	case cfg.CacheSize < 0:
		return nil, fmt.Errorf("history: CacheSize must not be negative, got %d", cfg.CacheSize)
	}
	if cfg.HTTPAddr != "off" {
		if _, _, err := net.SplitHostPort(cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("history: HTTPAddr must be host:port or \"off\", got %q: %w", cfg.HTTPAddr, err)
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	auth, err := newHTTPAuth(&cfg)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, logger: logger.With(slog.String("component", "history")), started: make(chan struct{}),
		awaitPoll: defaultAwaitPoll, hookClaimGrace: defaultHookClaimGrace, auth: auth}, nil
}

// Start connects, creates Flow's streams if needed, checks them for damage (rebuilding what it
// can), and starts consuming the history stream and answering queries. It returns once the
// service consumes and answers, with the repairs of its check shown in its listings.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if s.nc, s.ownConn, err = s.cfg.NATS.As(natsconn.RoleHistory).Use(s.cfg.Conn, "flow-history"); err != nil {
		return err
	}
	if err := s.start(ctx); err != nil {
		s.shutdown()
		return err
	}
	close(s.started)
	s.readiness.Started()
	return nil
}

func (s *Service) start(ctx context.Context) error {
	if err := s.open(ctx); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	if err := s.index.start(runCtx, &s.workers); err != nil {
		return err
	}
	if err := s.observe(); err != nil {
		return err
	}
	if err := s.park.start(runCtx, &s.workers); err != nil {
		return err
	}
	live, err := liveness.Watch(runCtx, s.js, s.logger)
	if err != nil {
		return err
	}
	s.live = live
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := s.showRepairs(ctx); err != nil {
		return err
	}
	if err := s.consume(runCtx); err != nil {
		return err
	}
	s.workers.Go(func() { s.park.showParked(runCtx) })
	s.startRetention(runCtx)
	if err := s.serve(); err != nil {
		return err
	}
	s.logger.InfoContext(ctx, "history service started", slog.Int("lanes", s.cfg.Lanes), slog.String("http", s.HTTPAddr()))
	return nil
}

func (s *Service) open(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return err
	}
	s.js = js
	if err := streams.Provision(ctx, js, s.cfg.Streams); err != nil {
		return err
	}
	// Start keys: the service is the bucket's one writer (startkeys.go); its engine releases a
	// debounce key when its run's delay fires.
	if s.keys, err = jshost.NewStartKeys(ctx, js); err != nil {
		return err
	}
	be, err := backend.Open(ctx, js, backend.Role{Source: "flow/history", Logger: s.logger, Faults: s.cfg.Faults, HostFaults: s.cfg.Faults},
		engine.Config{CacheSize: -1, Keys: s.keys})
	if err != nil {
		return err
	}
	s.store, s.host, s.engine = be.Store, be.Host, be.Engine
	s.layout = be.Store.Layout()
	if s.defs, err = definitions.Open(ctx, js); err != nil {
		return err
	}
	if s.parked, err = parked.Open(ctx, js); err != nil {
		return err
	}
	if s.damaged, err = jsstore.OpenDamaged(ctx, js); err != nil {
		return err
	}
	if s.runs, err = runsindex.Open(ctx, js); err != nil {
		return err
	}
	if s.control, err = openControl(ctx, js); err != nil {
		return err
	}
	if s.retention, err = openRetention(ctx, js, s.cfg); err != nil {
		return err
	}
	s.index = newReadModel(s.runs, s.logger)
	s.index.beforeApply = s.beforeIndexApply
	s.park = newParking(s)
	return nil
}

// HTTPAddr returns the address the HTTP API listens on, or "" when it is off.
func (s *Service) HTTPAddr() string {
	if s.httpAddr == nil {
		return ""
	}
	return s.httpAddr.String()
}

// Stop stops consuming and answering, and waits for the commits being applied: a commit cut
// short is not acknowledged and is applied again by the next replica. It is idempotent and
// safe before Start.
func (s *Service) Stop() error {
	s.once.Do(func() {
		select {
		case <-s.started:
		default:
			return
		}
		s.readiness.Stopping()
		s.shutdown()
		s.logger.Info("history service stopped")
	})
	return nil
}

func (s *Service) shutdown() {
	if s.micro != nil {
		_ = s.micro.Stop()
	}
	if s.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.httpSrv.Shutdown(ctx)
		cancel()
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.unobserve != nil {
		s.unobserve()
	}
	if s.live != nil {
		s.live.Stop()
	}
	s.workers.Wait()
	if s.ownConn && s.nc != nil {
		s.nc.Close()
	}
}

// Applied returns the number of commits this service has applied.
func (s *Service) Applied() int64 { return s.applied.load() }

// WaitApplied returns once this service has applied at least n commits, or ctx ends.
func (s *Service) WaitApplied(ctx context.Context, n int64) error { return s.applied.wait(ctx, n) }
