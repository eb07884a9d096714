package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/pkg/flow"
)

func (e *env) resetCmd() *cobra.Command {
	var opts flow.ResetOptions
	cmd := &cobra.Command{
		Use:   "reset RUN (--to SEQ | --to-step ID | --to-last-decision)",
		Short: "Start a new run from a prefix of a run's history, reapplying the inputs after it",
		Long: `Start a new run that copies RUN's history up to a reset point, then reapplies the signals,
hook deliveries and updates RUN recorded after it (or, with --drop-inputs, drops them). RUN
records run.reset naming the new run and, if it is still active, ends (run.failed, cause
operator). A reset point is a decision boundary: the copied prefix ends where a decision is
due next (see docs/reset.md); --to with another sequence is refused with the nearest points.
  flow reset order-7 --to 5
  flow reset order-7 --to-step charge --reason "card gateway fixed"
  flow reset order-7 --to-last-decision --drop-inputs
--json prints {"RunID":RUN,"NewRunID":NEW,"Point":SEQ,"Mode":MODE,"Reapplied":N}.`,
		Args: args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			r, err := client.Reset(c.Context(), a[0], &opts)
			if err != nil {
				return err
			}
			return e.printReset(r)
		}),
	}
	f := cmd.Flags()
	f.Uint64Var(&opts.Seq, "to", 0, "the reset point: the last event of RUN to copy")
	f.StringVar(&opts.StepID, "to-step", "", "reset to just before the decision that scheduled this step, so that it runs again")
	f.BoolVar(&opts.LastDecision, "to-last-decision", false, "reset to just before RUN's last decision (a blocked run, after deploying fixed code)")
	f.BoolVar(&opts.DropInputs, "drop-inputs", false, "drop the signals, hook deliveries and updates after the point instead of reapplying them")
	f.StringVar(&opts.Reason, "reason", "reset from the command line", "why, recorded in both runs")
	f.StringVar(&opts.RequestID, "request-id", "", "identifies the request: a repeat returns the same new run")
	return cmd
}

func (e *env) rerunCmd() *cobra.Command {
	var opts flow.RerunOptions
	var step, input string
	cmd := &cobra.Command{
		Use:   "rerun RUN --from-step ID [--input JSON]",
		Short: "Run a run again from one of its steps, in a new run (a reset to before the step)",
		Long: `Run RUN again from step ID in a new run: a reset to just before the decision that scheduled
the step (flow reset --to-step). --input replaces the run's input in the new run; the copied
decisions before the step are checked against it on replay, and one that now differs blocks
the new run with a non-determinism error naming the field (rerun from the first step to
change everything).
  flow rerun order-7 --from-step charge
  flow rerun order-7 --from-step reserve --input '{"item":"pen","qty":3}'`,
		Args: args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			if input != "" {
				if err := checkPayload(input); err != nil {
					return err
				}
				opts.Input = json.RawMessage(input)
			}
			r, err := client.Rerun(c.Context(), a[0], step, &opts)
			if err != nil {
				return err
			}
			return e.printReset(r)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&step, "from-step", "", "the step to run again, with everything after it (required)")
	f.StringVar(&input, "input", "", "a new input for the run, as JSON (default: the old run's)")
	f.BoolVar(&opts.DropInputs, "drop-inputs", false, "drop the inputs after the point instead of reapplying them")
	f.StringVar(&opts.Reason, "reason", "rerun from the command line", "why, recorded in both runs")
	f.StringVar(&opts.RequestID, "request-id", "", "identifies the request: a repeat returns the same new run")
	_ = cmd.MarkFlagRequired("from-step")
	return cmd
}

func (e *env) printReset(r *flow.ResetResult) error {
	return e.answer(r, "%s reset to seq %d (%s) as %s; %d input(s) reapplied", r.RunID, r.Point, r.Mode, r.NewRunID, r.Reapplied)
}

// printResets prints the links of a reset run to its old run and of a run to its resets.
func printResets(w io.Writer, s *flow.Snapshot) {
	if r := s.ResetFrom; r != nil {
		how := fmt.Sprintf("%d input(s) reapplied", r.Reapplied)
		if r.DropInputs {
			how = "inputs dropped"
		}
		fmt.Fprintf(w, "Reset from  %s at seq %d (%s%s), %s\n", r.RunID, r.Seq, r.Mode, prefixed(" ", r.StepID), how)
	}
	for _, r := range s.Resets {
		fmt.Fprintf(w, "Reset as    %s from seq %d (%s%s), at seq %d\n", r.NewRunID, r.Point, r.Mode, prefixed(" ", r.StepID), r.Seq)
	}
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}
