// Package cli is the `flow` command line: `flow dev` runs everything on one machine, the other
// commands drive and inspect runs over NATS, connecting as the nats CLI does (--server,
// FLOW_NATS_URL, NATS_URL, a nats context; see natsconn.Config). cmd/flow only calls Main.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/pkg/flow"
)

// env holds what every command shares: flags, environment and output.
type env struct {
	nats   natsconn.Config // from the connection flags; what they leave empty, Dial resolves
	flags  *pflag.FlagSet  // the persistent flags, to name the one that set a value
	queue  string
	json   bool
	stdout io.Writer
	stderr io.Writer
}

// Main runs the flow command with args and returns the process exit code: 0 on success, 1 on
// an error (printed as one line on stderr), 2 on a usage error.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	stderr = &lockedWriter{w: stderr} // the NATS connection's error handler writes to it too
	e := &env{stdout: stdout, stderr: stderr}
	root := e.root()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var usage usageError
	msg := err.Error()
	if !strings.HasPrefix(msg, "flow: ") {
		msg = "flow: " + msg
	}
	fmt.Fprintln(stderr, msg)
	if errors.As(err, &usage) || isCobraUsage(err) {
		return 2
	}
	return 1
}

// lockedWriter serialises the writes of several goroutines to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// usageError is an error in the command line itself.
type usageError struct{ error }

func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, s := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "flag needs an argument", "invalid argument"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (e *env) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "flow",
		Short: "Flow: durable workflows on NATS JetStream",
		Long: `Flow runs durable workflows: each run is an append-only history of events in NATS JetStream,
and any worker can continue a run after any committed event.

Start everything on this machine with 'flow dev', then drive it from another terminal:

  flow start order --wait     start a run of the example "order" workflow and wait for its result
  flow runs                   list runs with their status
  flow history RUN            show a run's events

Commands other than 'dev' connect to NATS as the nats CLI does: to --server, else FLOW_NATS_URL,
else NATS_URL, else the url of the nats context (--context, FLOW_NATS_CONTEXT, NATS_CONTEXT, or
the one 'nats context select' chose), else nats://127.0.0.1:4222. Credentials and TLS come from
--creds, --nkey, --user, --tlsca, --tlscert and --tlskey, the FLOW_NATS_* and NATS_* variables,
or the context.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what `flow version` prints.
		Version: currentBuild().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	e.connectionFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&e.queue, "queue", envOr("FLOW_QUEUE", "default"), "task queue (env FLOW_QUEUE)")
	root.PersistentFlags().BoolVar(&e.json, "json", false, "print JSON instead of text")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())}
	})
	root.AddCommand(e.devCmd(), e.startCmd(), e.statusCmd(), e.historyCmd(), e.watchCmd(), e.runsCmd(),
		e.cancelCmd(), e.signalCmd(), e.hookCmd(), e.terminateCmd(), e.resumeCmd(), e.verifyCmd(), e.definitionsCmd(), e.versionCmd())
	root.AddCommand(e.queryCmd())
	root.AddCommand(e.updateCmd())
	root.AddCommand(e.resetCmd(), e.rerunCmd())
	root.AddCommand(e.scheduleCmd())
	root.AddCommand(e.batchCmd())
	root.AddCommand(e.pauseCmd(), e.unpauseCmd(), e.pausesCmd())
	root.AddCommand(e.payloadCmd())
	return root
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// connectionFlags defines the flags that say how to reach NATS, named as the nats CLI names
// them. Their defaults are empty: natsconn.Config.Dial reads the environment and the nats
// context for what they leave unset.
func (e *env) connectionFlags(f *pflag.FlagSet) {
	e.flags = f
	f.StringVarP(&e.nats.URL, "server", "s", "", "NATS server URL, or several comma-separated (env FLOW_NATS_URL, NATS_URL; default the context's, or "+natsconn.DefaultURL+")")
	f.StringVar(&e.nats.URL, "nats-url", "", "the same as --server")
	_ = f.MarkHidden("nats-url")
	f.StringVar(&e.nats.Creds, "creds", "", "NATS user credentials file (env FLOW_NATS_CREDS, NATS_CREDS)")
	f.StringVar(&e.nats.NKey, "nkey", "", "NATS user nkey seed file (env FLOW_NATS_NKEY, NATS_NKEY)")
	f.StringVar(&e.nats.User, "user", "", "NATS user name (env FLOW_NATS_USER, NATS_USER); the password comes from --password, FLOW_NATS_PASSWORD or NATS_PASSWORD")
	f.StringVar(&e.nats.Password, "password", "", "NATS password; prefer FLOW_NATS_PASSWORD, which other users cannot see in the process list")
	f.StringVar(&e.nats.TLS.CA, "tlsca", "", "TLS certificate authority file (PEM) for the NATS servers (env FLOW_NATS_TLS_CA, NATS_CA)")
	f.StringVar(&e.nats.TLS.Cert, "tlscert", "", "TLS client certificate file (PEM) (env FLOW_NATS_TLS_CERT, NATS_CERT)")
	f.StringVar(&e.nats.TLS.Key, "tlskey", "", "TLS client private key file (PEM) (env FLOW_NATS_TLS_KEY, NATS_KEY)")
	f.BoolVar(&e.nats.TLS.First, "tlsfirst", false, "do the TLS handshake before the NATS server's greeting (env FLOW_NATS_TLS_FIRST)")
	f.StringVar(&e.nats.Context, "context", "", "nats CLI context to connect with (env FLOW_NATS_CONTEXT, NATS_CONTEXT; default the selected one)")
	e.nats.Origin = e.origin
}

// origin names the flag that set a field of e.nats, for errors.
func (e *env) origin(field string) string {
	name := map[string]string{"URL": "server", "Creds": "creds", "NKey": "nkey", "User": "user", "Password": "password",
		"TLS.CA": "tlsca", "TLS.Cert": "tlscert", "TLS.Key": "tlskey", "Context": "context"}[field]
	if name == "server" && e.flags.Changed("nats-url") {
		name = "nats-url"
	}
	if name == "" || !e.flags.Changed(name) {
		return ""
	}
	return "--" + name
}

// client connects to NATS as the connection flags say and returns a client on that connection.
func (e *env) client(ctx context.Context) (*flow.Client, error) {
	nc, err := e.nats.As(natsconn.RoleClient).Dial("flow-client", nats.ErrorHandler(e.asyncError))
	if err != nil {
		return nil, err
	}
	c, err := flow.NewClient(ctx, nc, &flow.ClientOptions{Queue: e.queue, CloseConn: true})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// asyncError prints an error the NATS server reported on the connection outside of any call,
// once, on stderr. A permissions violation is left to the call it refused: the client returns it
// as a *flow.PermissionError that says what to do, which the command prints.
func (e *env) asyncError(_ *nats.Conn, _ *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	fmt.Fprintf(e.stderr, "flow: NATS: %v\n", err)
}

// args checks the number of positional arguments with a message that names them.
func args(names ...string) cobra.PositionalArgs {
	return func(c *cobra.Command, a []string) error {
		if len(a) != len(names) {
			return usageError{fmt.Errorf("%s takes %d argument(s), %s; got %d (see '%s --help')",
				c.CommandPath(), len(names), strings.Join(names, " "), len(a), c.CommandPath())}
		}
		return nil
	}
}
