// Package cli is the `flow` command line: `flow dev` runs everything on one machine, the other
// commands drive and inspect runs over NATS (FLOW_NATS_URL). cmd/flow only calls Main.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/pkg/flow"
)

// env holds what every command shares: flags, environment and output.
type env struct {
	natsURL string
	queue   string
	json    bool
	stdout  io.Writer
	stderr  io.Writer
}

// Main runs the flow command with args and returns the process exit code: 0 on success, 1 on
// an error (printed as one line on stderr), 2 on a usage error.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
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

Commands other than 'dev' connect to FLOW_NATS_URL (default nats://127.0.0.1:4222).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&e.natsURL, "nats-url", envOr("FLOW_NATS_URL", natsconn.DefaultURL), "NATS server URL (env FLOW_NATS_URL)")
	root.PersistentFlags().StringVar(&e.queue, "queue", envOr("FLOW_QUEUE", "default"), "task queue (env FLOW_QUEUE)")
	root.PersistentFlags().BoolVar(&e.json, "json", false, "print JSON instead of text")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())}
	})
	root.AddCommand(e.devCmd(), e.startCmd(), e.statusCmd(), e.historyCmd(), e.watchCmd(), e.runsCmd(),
		e.cancelCmd(), e.signalCmd(), e.terminateCmd(), e.resumeCmd(), e.verifyCmd(), e.definitionsCmd())
	return root
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// client dials the configured NATS server.
func (e *env) client(ctx context.Context) (*flow.Client, error) {
	return flow.Dial(ctx, e.natsURL, &flow.ClientOptions{Queue: e.queue})
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
