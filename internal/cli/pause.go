package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/pkg/flow"
)

// flow pause, flow unpause and flow pauses (docs/pause.md).

type pauseFlags struct {
	reason, by, requestID, definition string
}

func (f *pauseFlags) bind(c *cobra.Command, what string) {
	c.Flags().StringVar(&f.reason, "reason", "", "why, recorded with the "+what)
	c.Flags().StringVar(&f.by, "by", os.Getenv("USER"), "who asks, recorded with the "+what+" (default $USER)")
	c.Flags().StringVar(&f.requestID, "request-id", "", "the request's ID: a repeat with the same ID is applied once (default: a fresh one)")
	c.Flags().StringVar(&f.definition, "definition", "", "pause or unpause every run of this definition instead of one run")
}

func (f *pauseFlags) options() *flow.PauseOptions {
	return &flow.PauseOptions{Reason: f.reason, By: f.by, RequestID: f.requestID}
}

// target returns what the command names: a run (RUN), a definition (--definition) or a queue
// (--queue, the root's flag, given explicitly).
func (f *pauseFlags) target(c *cobra.Command, a []string, queue string) (scope, name string, err error) {
	n := 0
	if len(a) == 1 {
		scope, name, n = "run", a[0], n+1
	}
	if f.definition != "" {
		scope, name, n = "definition", f.definition, n+1
	}
	if c.Flags().Changed("queue") {
		scope, name, n = "queue", queue, n+1
	}
	if n != 1 || len(a) > 1 {
		return "", "", usageError{fmt.Errorf("%s takes one of RUN, --definition NAME or --queue NAME (see '%s --help')", c.CommandPath(), c.CommandPath())}
	}
	return scope, name, nil
}

func (e *env) pauseCmd() *cobra.Command {
	var f pauseFlags
	cmd := &cobra.Command{
		Use:   "pause [RUN] [--definition NAME | --queue NAME]",
		Short: "Pause a run, or every run of a definition or queue",
		Long: `Pause a run: until 'flow unpause RUN' it makes no decision and starts no step attempt,
while its signals, hook deliveries, updates, cancellation requests and timers are still
recorded; an attempt already running finishes and its result is recorded, and its retry waits.
'flow terminate' still ends a paused run; a cancellation request is answered once it is
unpaused.

With --definition or --queue, pause every run of that definition or task queue: workers make
no decision and start no attempt of them (they park them) until 'flow unpause --definition
NAME' (or --queue), and nothing they record is lost meanwhile. 'flow pauses' lists them.
--json prints {"run_id":RUN,"delivered_to":RUN_OR_ITS_SUCCESSOR,"status":"accepted"} for a run,
the pause for a definition or queue.`,
		Args: cobra.MaximumNArgs(1),
		RunE: e.pauseRunE(&f, func(c *cobra.Command, p flow.PauseClient, run string) (string, string, error) {
			to, err := p.PauseRun(c.Context(), run, f.options())
			return to, fmt.Sprintf("%s paused%s; `flow unpause %s` lets it go on", run, forwarded(run, to), to), err
		}, func(c *cobra.Command, p flow.PauseClient, scope, name string) error {
			pause := p.PauseQueue
			if scope == "definition" {
				pause = p.PauseDefinition
			}
			sp, err := pause(c.Context(), name, f.options())
			if err != nil {
				return err
			}
			return e.answer(sp, "%s %s paused; its runs make no decision and start no step until `flow unpause --%s %s`", scope, name, scope, name)
		}),
	}
	f.bind(cmd, "pause")
	return cmd
}

// pauseRunE is the RunE of pause and unpause: it finds the target f names, then hands a run to
// onRun, which returns the run the request reached (the run or its successor) and the line that
// says so, and a definition or queue to onScope.
func (e *env) pauseRunE(f *pauseFlags,
	onRun func(c *cobra.Command, p flow.PauseClient, run string) (to, line string, err error),
	onScope func(c *cobra.Command, p flow.PauseClient, scope, name string) error,
) func(*cobra.Command, []string) error {
	return e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
		scope, name, err := f.target(c, a, e.queue)
		if err != nil {
			return err
		}
		if scope != "run" {
			return onScope(c, client.Pauses(), scope, name)
		}
		to, line, err := onRun(c, client.Pauses(), name)
		if err != nil {
			return err
		}
		return e.answer(accepted(name, to), "%s", line)
	})
}

func (e *env) unpauseCmd() *cobra.Command {
	var f pauseFlags
	cmd := &cobra.Command{
		Use:   "unpause [RUN] [--definition NAME | --queue NAME]",
		Short: "Unpause a run, or every run of a definition or queue",
		Long: `Unpause a run: the decision that is due is made and the attempts held start. A step that
exhausted its attempts under a retry policy with OnExhaustion flow.ExhaustionPauseRun gets a fresh
attempt: fix what failed (deploy the fix), then unpause. Unpausing a run that is not paused
does nothing.

With --definition or --queue, end that pause: the history service dispatches the runs it held.
--json prints {"run_id":RUN,"delivered_to":RUN_OR_ITS_SUCCESSOR,"status":"accepted"} for a run,
{"scope":...,"name":...,"found":BOOL} for a definition or queue.`,
		Args: cobra.MaximumNArgs(1),
		RunE: e.pauseRunE(&f, func(c *cobra.Command, p flow.PauseClient, run string) (string, string, error) {
			to, err := p.UnpauseRun(c.Context(), run, f.options())
			return to, fmt.Sprintf("%s unpaused%s", run, forwarded(run, to)), err
		}, func(c *cobra.Command, p flow.PauseClient, scope, name string) error {
			unpause := p.UnpauseQueue
			if scope == "definition" {
				unpause = p.UnpauseDefinition
			}
			found, err := unpause(c.Context(), name, f.options())
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, map[string]any{"scope": scope, "name": name, "found": found})
			}
			if !found {
				fmt.Fprintf(e.stdout, "%s %s was not paused\n", scope, name)
				return nil
			}
			fmt.Fprintf(e.stdout, "%s %s unpaused; the runs it held are dispatched again\n", scope, name)
			return nil
		}),
	}
	f.bind(cmd, "unpause")
	return cmd
}

func (e *env) pausesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pauses",
		Short: "List the paused definitions and queues",
		Long: `List the paused definitions and queues, with their note, who paused them and when. Paused
runs are listed by 'flow runs --status paused'. --json prints the list.`,
		Args: args(),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, _ []string) error {
			ps, err := client.Pauses().List(c.Context())
			if err != nil {
				return err
			}
			if e.json {
				if ps == nil {
					ps = []flow.ScopePause{}
				}
				return writeJSON(e.stdout, ps)
			}
			if len(ps) == 0 {
				fmt.Fprintln(e.stdout, "no definition or queue is paused (paused runs: `flow runs --status paused`)")
				return nil
			}
			fmt.Fprintf(e.stdout, "%-11s %-24s %-21s %-12s %s\n", "SCOPE", "NAME", "SINCE", "BY", "NOTE")
			for _, p := range ps {
				fmt.Fprintf(e.stdout, "%-11s %-24s %-21s %-12s %s\n", p.Scope, p.Name, p.At.UTC().Format(time.RFC3339), dash(p.By), p.Note)
			}
			return nil
		}),
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printPause prints a paused run's pause in `flow status`.
func printPause(w io.Writer, s *flow.Snapshot) {
	p := s.Paused
	if p == nil || s.Outcome != nil {
		return
	}
	fmt.Fprintf(w, "Paused      %s (since seq %d, %s)\n", p.Describe(s.RunID), p.Seq, p.At.Format(time.RFC3339Nano))
	if len(p.Steps) == 0 {
		fmt.Fprintf(w, "            `flow unpause %s` lets it go on\n", s.RunID)
	}
}
