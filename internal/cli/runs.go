package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

func (e *env) startCmd() *cobra.Command {
	var id, input string
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "start DEFINITION",
		Short: "Start a run of a workflow definition",
		Long: `Start a run of a workflow definition published by a worker of the queue, and print its ID.
With --wait, wait for the run to end and print its output; a run that fails, is cancelled or is
blocked exits with status 1.

Starting an existing run ID again with the same definition and input returns that run; with a
different input it is an error.`,
		Example: `  flow start order --wait
  flow start fanout --input '{"items":20}' --id fanout-1
  flow start reminder --input '{"who":"ann","after":"30s"}'`,
		Args: args("DEFINITION"),
		RunE: func(c *cobra.Command, a []string) error {
			var in json.RawMessage
			if input != "" {
				if !json.Valid([]byte(input)) {
					var v any
					err := json.Unmarshal([]byte(input), &v)
					return usageError{fmt.Errorf("--input is not valid JSON (%v); quote it for the shell, e.g. --input '{\"items\":3}'", err)}
				}
				in = json.RawMessage(input)
			}
			ctx := c.Context()
			client, err := e.client(ctx)
			if err != nil {
				return err
			}
			defer client.Close()
			runID, err := client.Start(ctx, a[0], in, &flow.StartOptions{RunID: id})
			if err != nil {
				return err
			}
			if !wait {
				if e.json {
					return writeJSON(e.stdout, map[string]string{"run_id": runID})
				}
				fmt.Fprintln(e.stdout, runID)
				return nil
			}
			if timeout > 0 {
				var cancel func()
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			var out json.RawMessage
			err = client.Result(ctx, runID, &out)
			if e.json {
				res := map[string]any{"run_id": runID, "output": out}
				if err != nil {
					res["error"] = err.Error()
				}
				if werr := writeJSON(e.stdout, res); werr != nil {
					return werr
				}
				return err
			}
			fmt.Fprintf(e.stdout, "run %s\n", runID)
			if err != nil {
				return fmt.Errorf("%w; see `flow history %s`", err, runID)
			}
			fmt.Fprintf(e.stdout, "completed: %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "run ID: letters, digits, '-' or '_' (default: generated)")
	cmd.Flags().StringVar(&input, "input", "", "input as JSON (default: null)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the run to end and print its output")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --wait, give up after this long (default: no limit)")
	return cmd
}

func (e *env) statusCmd() *cobra.Command {
	var at uint64
	cmd := &cobra.Command{
		Use:   "status RUN",
		Short: "Show a run's status, steps and waits, now or as of any event",
		Long: `Show the snapshot projected from a run's history: status, steps with attempts, waits, signals,
hooks, children and the outcome, with why the run is parked if it is. --at SEQ shows the run as it
was right after event SEQ (see 'flow history RUN' for the sequences). --json prints the snapshot.`,
		Example: `  flow status order-2026-0001
  flow status order-2026-0001 --at 3`,
		Args: args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			d, err := client.Describe(c.Context(), a[0], at)
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, d)
			}
			if at > 0 {
				fmt.Fprintf(e.stdout, "As of seq %d of %d\n", at, d.Last)
			}
			printSnapshot(e.stdout, d.Snapshot)
			if d.Entry != nil && at == 0 {
				if d.Entry.Parked != "" {
					fmt.Fprintf(e.stdout, "Parked      %s (`flow resume %s` dispatches it again)\n", d.Entry.Parked, a[0])
				}
				if d.Entry.Damaged != "" {
					fmt.Fprintf(e.stdout, "Damaged     %s\n", d.Entry.Damaged)
				}
			}
			return nil
		}),
	}
	cmd.Flags().Uint64Var(&at, "at", 0, "show the run as of this event sequence (default: the latest)")
	return cmd
}

func printSnapshot(w io.Writer, s *flow.Snapshot) {
	fmt.Fprintf(w, "Run         %s\nDefinition  %s\nStatus      %s\n", s.RunID, s.Spec.Definition, s.Status)
	if s.Spec.BuildID != "" {
		fmt.Fprintf(w, "Build       %s\n", s.Spec.BuildID)
	}
	fmt.Fprintf(w, "Started     %s\nUpdated     %s\nEvents      %d\n", s.StartedAt.Format(time.RFC3339Nano), s.UpdatedAt.Format(time.RFC3339Nano), s.Seq)
	if s.Parent != nil {
		fmt.Fprintf(w, "Parent      %s (child %s)\n", s.Parent.RunID, s.Parent.ChildID)
	}
	if s.Blocked != nil {
		fmt.Fprintf(w, "Blocked     %s at seq %d: %s\n", s.Blocked.Kind, s.Blocked.Seq, s.Blocked.Detail)
	}
	if s.CancelRequested {
		fmt.Fprintf(w, "Cancel      requested: %s\n", s.CancelReason)
	}
	if o := s.Outcome; o != nil {
		switch {
		case o.Output != nil:
			fmt.Fprintf(w, "Output      %s\n", o.Output)
		case o.Error != nil:
			fmt.Fprintf(w, "Error       %s\n", o.Error.Error())
		case o.SuccessorRunID != "":
			fmt.Fprintf(w, "Continued   as %s\n", o.SuccessorRunID)
		case o.Reason != "":
			fmt.Fprintf(w, "Reason      %s\n", o.Reason)
		}
	}
	if len(s.Steps) > 0 {
		fmt.Fprintln(w, "\nSteps")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tNAME\tSTATUS\tATTEMPT\tRESULT")
		steps := make([]*core.Step, 0, len(s.Steps))
		for _, st := range s.Steps {
			steps = append(steps, st)
		}
		slices.SortFunc(steps, func(a, b *core.Step) int {
			if a.BatchSeq != b.BatchSeq {
				return int(a.BatchSeq) - int(b.BatchSeq)
			}
			return strings.Compare(a.ID, b.ID)
		})
		for _, st := range steps {
			result := ""
			switch {
			case st.Output != nil:
				result = truncate(string(st.Output), 60)
			case st.Error != nil:
				result = truncate(st.Error.Error(), 60)
			}
			if st.Status == core.StepRetrying && !st.RetryDue.IsZero() {
				result = "next attempt at " + st.RetryDue.Format(time.RFC3339Nano)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\n", st.ID, st.Name, st.Status, st.Attempt, result)
		}
		_ = tw.Flush()
	}
	if len(s.Waits) > 0 {
		fmt.Fprintln(w, "\nWaits")
		for _, wt := range s.Waits {
			state := "pending until " + wt.Deadline.Format(time.RFC3339Nano)
			if wt.Fired {
				state = "fired at seq " + fmt.Sprint(wt.FiredSeq)
			}
			fmt.Fprintf(w, "  %s  %s\n", wt.ID, state)
		}
	}
	for _, sw := range s.SignalWaits {
		state := "waiting"
		if sw.Received() {
			state = "received"
		}
		fmt.Fprintf(w, "Signal wait %s (%s): %s\n", sw.ID, sw.Name, state)
	}
	for _, h := range s.Hooks {
		fmt.Fprintf(w, "Hook %s: token %s received=%v\n", h.ID, h.Token, h.Received)
	}
	for _, ch := range s.Children {
		state := "running"
		if ch.Settled {
			state = string(ch.Outcome)
		}
		fmt.Fprintf(w, "Child %s: run %s %s\n", ch.ID, ch.RunID, state)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func (e *env) historyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "history RUN",
		Short: "Show a run's events in order",
		Long:  "Show a run's committed events in order. --json prints one envelope per line, the format\nflowtest.Replay and `flow verify` read.",
		Args:  args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			hist, err := client.History(c.Context(), a[0], 0)
			if err != nil {
				return err
			}
			for _, ev := range hist {
				if err := e.printEvent(ev); err != nil {
					return err
				}
			}
			return nil
		}),
	}
}

func (e *env) printEvent(ev event.Envelope) error {
	if e.json {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "%s\n", b)
		return err
	}
	data, err := json.Marshal(ev.Payload)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "%4d  %s  %-22s %s\n", ev.Seq, ev.Time.Format("15:04:05.000000"), ev.Type(), truncate(string(data), 160))
	return err
}

func (e *env) watchCmd() *cobra.Command {
	var after uint64
	cmd := &cobra.Command{
		Use:   "watch RUN",
		Short: "Follow a run's events live until it ends",
		Args:  args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			return client.Watch(c.Context(), a[0], after, e.printEvent)
		}),
	}
	cmd.Flags().Uint64Var(&after, "after", 0, "start after this sequence")
	return cmd
}

func (e *env) resumeCmd() *cobra.Command {
	var acceptDamage bool
	cmd := &cobra.Command{
		Use:   "resume RUN",
		Short: "Dispatch a parked or blocked run to a worker again",
		Long: `Send a run a fresh task: a run parked because no worker of its queue could drive it (pinned to
a build no worker runs, or of a definition no worker registers), a blocked run after you deployed
fixed code, or any run you want a worker to look at now. Parked and blocked runs are also
dispatched again on their own when a worker registers their definition.

--accept-damage releases a run Flow quarantined because its history was found damaged: check the
run first ('flow history RUN'), since it is driven from what its history still holds.`,
		Args: args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			res, err := client.Resume(c.Context(), a[0], &flow.ResumeOptions{AcceptDamage: acceptDamage})
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, res)
			}
			fmt.Fprintf(e.stdout, "%s (%s at seq %d) dispatched to a worker\n", res.RunID, res.Status, res.Seq)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&acceptDamage, "accept-damage", false, "release a run quarantined because its history is damaged")
	return cmd
}

func (e *env) cancelCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Request cancellation of a run",
		Long:  "Request cancellation of a run. A workflow that handles cancellation may clean up first;\none that does not is cancelled at its next decision, with its unsettled steps.",
		Args:  args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			to, err := client.Cancel(c.Context(), a[0], reason)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "cancellation of %s requested%s\n", a[0], forwarded(a[0], to))
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "cancelled from the command line", "why, recorded in history")
	return cmd
}

func (e *env) terminateCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "terminate RUN",
		Short: "End a run as failed at once, whatever its code would decide (works on blocked runs)",
		Args:  args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			to, err := client.Terminate(c.Context(), a[0], reason)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s terminated%s\n", a[0], forwarded(a[0], to))
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "terminated from the command line", "why, recorded in history")
	return cmd
}

func (e *env) signalCmd() *cobra.Command {
	var payload, id string
	cmd := &cobra.Command{
		Use:   "signal RUN NAME",
		Short: "Send a named signal with a JSON payload to a run",
		Args:  args("RUN", "NAME"),
		RunE: func(c *cobra.Command, a []string) error {
			if !json.Valid([]byte(payload)) {
				return usageError{fmt.Errorf("--payload is not valid JSON; quote it for the shell, e.g. --payload '{\"ok\":true}'")}
			}
			client, err := e.client(c.Context())
			if err != nil {
				return err
			}
			defer client.Close()
			to, err := client.Signal(c.Context(), a[0], a[1], json.RawMessage(payload), &flow.SignalOptions{DeliveryID: id})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "signal %s sent to %s%s\n", a[1], a[0], forwarded(a[0], to))
			return nil
		},
	}
	cmd.Flags().StringVar(&payload, "payload", "null", "payload as JSON")
	cmd.Flags().StringVar(&id, "id", "", "delivery ID; a repeated ID is delivered once (default: generated)")
	return cmd
}

// forwarded says, when an input for run asked reached run to instead, that it was passed on.
func forwarded(asked, to string) string {
	if to == "" || to == asked {
		return ""
	}
	return fmt.Sprintf(" (forwarded to %s: %s continued as new)", to, asked)
}

// withClient adapts a command that needs a client: it dials before and closes after.
func (e *env) withClient(fn func(c *cobra.Command, client *flow.Client, a []string) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, a []string) error {
		client, err := e.client(c.Context())
		if err != nil {
			return err
		}
		defer client.Close()
		return fn(c, client.Client, a)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
