package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/spf13/cobra"

	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/telemetry"
	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// devOptions are the flags of `flow dev`.
type devOptions struct {
	dir, listen, httpAddr, ingressAddr, sync, level string
	noWorker, insecure                              bool
}

func (e *env) devCmd() *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run Flow on this machine: embedded NATS, history, ingress, scheduler, worker and example workflows",
		Long: `Run Flow on this machine, in one process: a real nats-server with JetStream storing its data
under --dir, the history service (with its HTTP API on --http), the ingress (inputs from outside
over NATS and HTTP on --ingress-http), a scheduler and a worker, with the example workflows
registered (--no-worker leaves the worker out, to run your own):

  order      three steps with idempotency keys and a retry policy (its first charge attempt
             times out, to show a retry)
  fanout     a batch of steps: flow start fanout --input '{"items":20}'
  reminder   a durable timer: flow start reminder --input '{"who":"ann","after":"10s"}'
  approval   waits for the signal "approve" with a deadline:
             flow start approval --input '{"timeout":"5m"}', then flow signal RUN approve
  webhook    creates a hook and logs its callback URL; completes with what is POSTed to it
  parent     starts two children, one with each cancellation policy; flow cancel the parent
             to see the difference

Other terminals drive it with the flow commands, which connect to nats://127.0.0.1:4222 unless
--server, FLOW_NATS_URL, NATS_URL or a selected nats context says otherwise. Stop with Ctrl-C; runs resume where they were on the next start.

The HTTP APIs (ingress and history) and the web UI require a bearer token: those of
FLOW_INGRESS_TOKENS (or FLOW_INGRESS_TOKENS_FILE, and FLOW_READ_TOKENS for read-only ones) as
flowd's services do, else one generated at first start into <dir>/token (mode 0600), shown once,
and reused on later starts. --insecure (or FLOW_INSECURE=true) requires none.`,
		Args: args(),
		RunE: func(c *cobra.Command, _ []string) error {
			return e.dev(c.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.dir, "dir", envOr("FLOW_DIR", ".flow"), "data directory (env FLOW_DIR)")
	cmd.Flags().StringVar(&o.listen, "listen", envOr("FLOW_LISTEN", "127.0.0.1:4222"), "NATS client address host:port (env FLOW_LISTEN)")
	cmd.Flags().StringVar(&o.httpAddr, "http", envOr("FLOW_HISTORY_HTTP_ADDR", history.DefaultHTTPAddr), `history service HTTP API address host:port, or "off" (env FLOW_HISTORY_HTTP_ADDR)`)
	cmd.Flags().StringVar(&o.ingressAddr, "ingress-http", envOr("FLOW_INGRESS_HTTP_ADDR", ingress.DefaultHTTPAddr), `ingress HTTP address host:port, or "off" (env FLOW_INGRESS_HTTP_ADDR)`)
	cmd.Flags().StringVar(&o.sync, "sync", envOr("FLOW_SYNC", ""), `JetStream fsync: "" (every 2 minutes), "always", or a duration (env FLOW_SYNC)`)
	cmd.Flags().StringVar(&o.level, "log-level", envOr("FLOW_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env FLOW_LOG_LEVEL)")
	cmd.Flags().BoolVar(&o.noWorker, "no-worker", false, "run everything but the example worker (start your own worker on the same queue)")
	cmd.Flags().BoolVar(&o.insecure, "insecure", envOr("FLOW_INSECURE", "") == "true", "require no bearer token on the HTTP APIs and the web UI (env FLOW_INSECURE=true); without it, flow dev uses FLOW_INGRESS_TOKENS, or generates a token at first start into <dir>/token")
	return cmd
}

func (e *env) dev(ctx context.Context, o devOptions) error {
	dir, listen, httpAddr, sync, level := o.dir, o.listen, o.httpAddr, o.sync, o.level
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return usageError{fmt.Errorf("--listen must be host:port, such as 127.0.0.1:4222: %w", err)}
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return usageError{fmt.Errorf("--listen port must be a number from 0 to 65535, got %q", portText)}
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return usageError{fmt.Errorf("--log-level must be debug, info, warn or error, got %q", level)}
	}
	logger := slog.New(tracing.NewHandler(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lv})))
	// One process, one telemetry: the history's HTTP listener serves /metrics for all of it; the
	// scheduler's and worker's own listeners stay off (their Config.HTTPAddr is empty).
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "flow-dev", Version: currentBuild().Version, Logger: logger})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()
	if port == 0 {
		port = -1
	}

	// The services' settings (tokens, HTTP bounds, input limits, ...) come from the environment
	// as for flowd; what flow dev decides (addresses, tokens, the connection) overrides them.
	var scfg natsserver.Config
	if err := envconfig.Process("FLOW_NATS_SERVER", &scfg); err != nil {
		return usageError{fmt.Errorf("reading FLOW_NATS_SERVER_* settings: %w", err)}
	}
	var hcfg history.Config
	if err := envconfig.Process("FLOW", &hcfg); err != nil {
		return usageError{fmt.Errorf("reading the history service's settings: %w", err)}
	}
	var icfg ingress.Config
	if err := envconfig.Process("FLOW", &icfg); err != nil {
		return usageError{fmt.Errorf("reading the ingress's settings: %w", err)}
	}
	scfg.Dir, scfg.Host, scfg.Port, scfg.Sync, scfg.Logger = filepath.Join(dir, "nats"), host, port, sync, logger
	srv, err := natsserver.Start(scfg)
	if err != nil {
		return err
	}
	// Shut down within a bound on every path: a server wedged by a damaged store must not keep
	// the process alive.
	defer func() { _ = srv.ShutdownWithin(10 * time.Second) }()
	nc, err := srv.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()

	auth, err := devAuthFor(dir, o.insecure, hcfg)
	if err != nil {
		return err
	}
	// The history service starts first: it checks the streams for damage before anything
	// drives a run, and every consequence of a commit follows from it. Its web UI forwards its
	// actions to the ingress's HTTP API, with the caller's token.
	var ingressURL atomic.Pointer[string] // set once the ingress listens
	hcfg.Conn, hcfg.HTTPAddr, hcfg.Logger = nc, httpAddr, logger
	hcfg.IngressURLOf = func() string {
		if u := ingressURL.Load(); u != nil {
			return *u
		}
		return ""
	}
	hcfg.Tokens, hcfg.TokensFile, hcfg.ReadTokens, hcfg.ReadTokensFile = auth.tokens, auth.tokensFile, auth.readTokens, auth.readTokensFile
	if err := devRetention(&hcfg); err != nil { // retention.go
		return err
	}
	h, err := history.New(hcfg)
	if err := startService(ctx, h, err); err != nil {
		return err
	}
	defer func() { _ = h.Stop() }()

	// The ingress takes inputs from outside: the CLI's, other programs', third parties' hook
	// callbacks.
	icfg.Conn, icfg.HTTPAddr, icfg.Queue, icfg.Logger = nc, o.ingressAddr, e.queue, logger
	icfg.Tokens, icfg.TokensFile = auth.tokens, auth.tokensFile
	in, err := ingress.New(icfg)
	if err != nil {
		return usageError{err}
	}
	if err := in.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = in.Stop() }()
	if addr := in.HTTPAddr(); addr != "" {
		u := devIngressURL(addr)
		ingressURL.Store(&u)
	}

	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: logger})
	examples.RegisterWith(reg, examples.Options{HookBaseURL: in.PublicURL(), Logger: logger})
	var w *worker.Worker
	if !o.noWorker {
		w, err = worker.New(worker.Config{Conn: nc, Queue: e.queue, Logger: logger}, reg)
		if err := startService(ctx, w, err); err != nil {
			return err
		}
	}
	// One scheduler per data directory: a restarted `flow dev` takes its own lease back at once.
	s, err := scheduler.New(scheduler.Config{Conn: nc, Logger: logger, Name: "flow-dev"})
	if err := startService(ctx, s, err); err != nil {
		return err
	}

	url := srv.ClientURL()
	workflows := fmt.Sprintf("%s on queue %q", strings.Join(sdk.RuntimeOf(reg).Workflows(), ", "), e.queue)
	if o.noWorker {
		workflows = fmt.Sprintf("none (--no-worker): start your own worker on queue %q", e.queue)
	}
	fmt.Fprintf(e.stdout, `Flow is running.
  NATS       %s (JetStream data in %s)
  History    %s
  Ingress    %s
  Workflows  %s
  Sync       %s
  Token      %s

Try, in another terminal:
  flow start order --wait
  flow start approval --input '{"timeout":"5m"}'   then: flow signal RUN approve --payload '{"note":"ok"}'
  flow start webhook                               then: curl the callback URL it logs
  flow runs
  flow watch RUN

Other commands reach this server at %s (pass --server or set NATS_URL if you changed --listen,
or if a nats context is selected).
Press Ctrl-C to stop; runs resume where they were on the next start.
`, url, filepath.Join(dir, "nats"), historyText(h.HTTPAddr()), ingressText(in.HTTPAddr()), workflows, syncText(sync), auth.text(historyURL(h.HTTPAddr())), url)

	<-ctx.Done()
	fmt.Fprintln(e.stdout, "Stopping: finishing in-flight steps (up to 10s)...")
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var werr error
	if w != nil {
		werr = w.Stop(stopCtx)
	}
	_ = in.Stop()
	_ = s.Stop()
	_ = h.Stop()
	nc.Close()
	if err := srv.ShutdownWithin(10 * time.Second); err != nil {
		werr = errors.Join(werr, err)
	}
	fmt.Fprintln(e.stdout, "Stopped.")
	return werr
}

func historyText(addr string) string {
	if addr == "" {
		return "queries over NATS only (HTTP API off)"
	}
	return "http://" + addr + "/v1/runs (runs index, snapshots at any sequence, history, watch); web UI http://" + addr + "/ui/"
}

// historyURL is the base URL of the history service's HTTP listener at addr ("" when off).
func historyURL(addr string) string {
	if addr == "" {
		return ""
	}
	return "http://" + addr
}

// starter is a service `flow dev` starts and, when it stops, stops.
type starter interface {
	Start(ctx context.Context) error
}

// startService starts s, which its constructor returned with err.
func startService(ctx context.Context, s starter, err error) error {
	if err != nil {
		return err
	}
	return s.Start(ctx)
}

// devIngressURL is the URL at which the history service reaches an ingress listening on addr.
func devIngressURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func ingressText(addr string) string {
	if addr == "" {
		return "NATS only, on flow.ingress.> (HTTP off)"
	}
	return "http://" + addr + " (POST /v1/workflows/{definition}/runs, /v1/runs/{id}/signals/{name}, /v1/hooks/{token}; GET /v1/openapi.json) and NATS flow.ingress.>"
}

func syncText(s string) string {
	switch s {
	case "":
		return "every 2 minutes (an acknowledged event survives a process crash; a machine crash may lose the last 2 minutes)"
	case "always":
		return "always (every acknowledged event is on disk)"
	}
	return "every " + s
}
