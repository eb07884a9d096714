package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/internal/batch"
	"github.com/flowrun/flow/pkg/flow"
)

// batchCmd is `flow batch`: bulk operations on the runs a filter selects, as durable jobs
// (docs/batch.md).
func (e *env) batchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "batch",
		Short: "Cancel, terminate, signal, reset, pause or unpause every run a filter selects, as a durable job",
		Long: `Apply one operation to every run a list filter selects (the language of 'flow runs --where',
docs/search.md), as a durable batch job: the runs are fixed when the job starts (runs started
later are never touched), the operation is applied to each once at the job's rate, whatever
process dies, and the job reports what it did to each.

  flow batch cancel --where 'definition = "order" and status = "blocked"' --reason "bad deploy"
  flow batch cancel --where 'customer = "c-42"' --dry-run      count and name the runs, create nothing
  flow batch signal approve --payload '{"ok":true}' --where 'stage = "review"' --rate 20
  flow batch status JOB                                       progress and report
  flow batch list
  flow batch stop JOB`,
	}
	for _, op := range []flow.BatchOp{flow.BatchCancel, flow.BatchTerminate, flow.BatchSignal, flow.BatchResetOp, flow.BatchPause, flow.BatchUnpause} {
		cmd.AddCommand(e.batchOpCmd(op))
	}
	cmd.AddCommand(e.batchStatusCmd(), e.batchListCmd(), e.batchStopCmd())
	return cmd
}

var batchShort = map[flow.BatchOp]string{
	flow.BatchCancel:    "Request the cancellation of every run a filter selects",
	flow.BatchTerminate: "End as failed every run a filter selects",
	flow.BatchSignal:    "Send a signal to every run a filter selects",
	flow.BatchResetOp:   "Reset every run a filter selects (a new run from a point of its history)",
	flow.BatchPause:     "Pause every run a filter selects",
	flow.BatchUnpause:   "Unpause every run a filter selects",
}

func (e *env) batchOpCmd(op flow.BatchOp) *cobra.Command {
	var (
		spec              = flow.BatchSpec{Op: op}
		rate, id, payload string
		input             string
		dryRun, wait      bool
		sample            int
		resetSpec         flow.BatchReset
	)
	use := string(op) + " --where FILTER"
	args := args()
	if op == flow.BatchSignal {
		use = "signal NAME --where FILTER"
		args = argsNamed("NAME")
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: batchShort[op],
		Long: batchShort[op] + `, as a durable batch job (see 'flow batch --help').
It prints the job's ID; follow it with 'flow batch status JOB', or wait for it with --wait.
--dry-run creates nothing: it checks the filter and counts (and names some of) the runs it
selects now. --json prints the job (or the dry run's answer) as JSON.`,
		Args: args,
		RunE: func(c *cobra.Command, a []string) error {
			r, err := parseRate(rate)
			if err != nil {
				return err
			}
			spec.Rate = r
			if op == flow.BatchSignal {
				spec.Signal = a[0]
				if payload != "" {
					if err := checkPayload(payload); err != nil {
						return err
					}
					spec.Payload = json.RawMessage(payload)
				}
			}
			if op == flow.BatchResetOp {
				if input != "" {
					if !json.Valid([]byte(input)) {
						return usageError{fmt.Errorf("--input is not valid JSON")}
					}
					resetSpec.Input = json.RawMessage(input)
				}
				spec.Reset = &resetSpec
			}
			if strings.TrimSpace(spec.Where) == "" {
				return usageError{fmt.Errorf("--where is required: say which runs, e.g. --where 'definition = \"order\" and status = \"running\"'")}
			}
			return e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
				return e.startBatch(c, client, spec, id, dryRun, wait, sample)
			})(c, a)
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec.Where, "where", "", "the runs: a list filter, as flow runs --where (required)")
	f.StringVar(&spec.Definition, "definition", "", "only runs of this definition (and its search attributes)")
	f.StringVar(&rate, "rate", "", fmt.Sprintf("operations per second, N or N/s (default %d/s, at most %d)", 50, 10000))
	f.StringVar(&id, "id", "", "the job's ID (default generated); the same ID and spec again returns that job")
	f.BoolVar(&dryRun, "dry-run", false, "count and name the runs the filter selects now; create nothing")
	f.IntVar(&sample, "sample", 20, "with --dry-run: how many runs to name")
	f.BoolVar(&wait, "wait", false, "wait for the job to end and print its report")
	switch op {
	case flow.BatchSignal:
		f.StringVar(&payload, "payload", "null", "the signal's JSON payload")
	case flow.BatchResetOp:
		f.StringVar(&resetSpec.Mode, "mode", "last_decision", "where to reset each run: seq, step, last_decision or rerun")
		f.Uint64Var(&resetSpec.Seq, "seq", 0, "with --mode seq: the sequence to reset to")
		f.StringVar(&resetSpec.StepID, "step", "", "with --mode step or rerun: the step")
		f.StringVar(&input, "input", "", "with --mode rerun: the new run's JSON input (default the old run's)")
		f.BoolVar(&resetSpec.DropInputs, "drop-inputs", false, "drop the signals, hooks and updates recorded after the point")
	}
	if op != flow.BatchSignal {
		f.StringVar(&spec.Reason, "reason", "", "why, recorded in each run's history")
	}
	return cmd
}

// argsNamed is args, for a command that names its arguments.
func argsNamed(names ...string) cobra.PositionalArgs { return args(names...) }

// parseRate reads --rate: "", "N" or "N/s".
func parseRate(s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "/s"), 64)
	if err != nil || v <= 0 || v > 10000 {
		return 0, usageError{fmt.Errorf("--rate %q is not a rate; write operations per second, e.g. --rate 20 or --rate 20/s (at most 10000)", s)}
	}
	return v, nil
}

func (e *env) batchStatusCmd() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "status JOB",
		Short: "Show a batch job's progress and report",
		Long: `Show a batch job's state and progress: its targets, how many are done, applied, skipped (by
reason) and failed (with the first errors), its rate, and when it started and ended. --wait
waits for it to end. --json prints the job.`,
		Args: args("JOB"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			var j *flow.BatchJob
			var err error
			if wait {
				j, err = client.Batches().Await(c.Context(), a[0])
			} else {
				j, err = client.Batches().Get(c.Context(), a[0])
			}
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, j)
			}
			printBatch(e.stdout, j)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the job to end")
	return cmd
}

func (e *env) batchListCmd() *cobra.Command {
	var states []string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the batch jobs, the latest first",
		Args:  args(),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			var st []flow.BatchState
			for _, s := range states {
				st = append(st, flow.BatchState(strings.TrimSpace(s)))
			}
			jobs, err := client.Batches().List(c.Context(), &flow.BatchListOptions{States: st, Limit: limit})
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, jobs)
			}
			tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tOP\tSTATE\tDONE\tAPPLIED\tSKIPPED\tFAILED\tCREATED\tWHERE")
			for _, j := range jobs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%d\t%d\t%s\t%s\n", j.ID, j.Spec.Op, displayState(&j), j.Cursor, j.Total,
					j.Applied, j.SkippedTotal(), j.Failed, j.CreatedAt.Format(time.RFC3339), j.Spec.Where)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only jobs in these states: pending, running, completed, stopped, failed")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many jobs")
	return cmd
}

func (e *env) batchStopCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "stop JOB",
		Short: "Stop a batch job: the runs it has not reached are left alone",
		Long: `Stop a batch job: a pending one at once, a running one once its current window of runs is
done. The runs after it are left alone; the report says how far it got.`,
		Args: args("JOB"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			j, err := client.Batches().Stop(c.Context(), a[0], reason)
			if err != nil {
				return err
			}
			return e.answer(j, "batch job %s: %s", j.ID, displayState(j))
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "stopped from the command line", "why")
	return cmd
}

// displayState is the job's state, "stopping" for a running job asked to stop.
func displayState(j *flow.BatchJob) string {
	if j.State == flow.BatchRunning && j.StopRequested {
		return "stopping"
	}
	return string(j.State)
}

func printBatch(w io.Writer, j *flow.BatchJob) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	row("job", "%s", j.ID)
	op := string(j.Spec.Op)
	switch {
	case j.Spec.Op == flow.BatchSignal:
		op += fmt.Sprintf(" %s %s", j.Spec.Signal, string(j.Spec.Payload))
	case j.Spec.Reason != "":
		op += fmt.Sprintf(" (reason %q)", j.Spec.Reason)
	}
	row("operation", "%s", op)
	where := j.Spec.Where
	if j.Spec.Definition != "" {
		where = fmt.Sprintf("definition %s: %s", j.Spec.Definition, where)
	}
	row("where", "%s", where)
	row("state", "%s", displayState(j))
	if j.State == flow.BatchPending {
		row("targets", "not recorded yet")
	} else {
		row("targets", "%d", j.Total)
		pct := 100.0
		if j.Total > 0 {
			pct = 100 * float64(j.Cursor) / float64(j.Total)
		}
		row("done", "%d (%.0f%%)", j.Cursor, pct)
	}
	row("applied", "%d", j.Applied)
	row("skipped", "%d", j.SkippedTotal())
	reasons := make([]string, 0, len(j.Skipped))
	for r := range j.Skipped {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	for _, r := range reasons {
		var names []string
		for _, n := range j.Skips {
			if n.Reason == r && len(names) < 5 {
				names = append(names, n.RunID)
			}
		}
		more := ""
		if j.Skipped[r] > len(names) {
			more = ", ..."
		}
		row("", "%d %s (%s%s)", j.Skipped[r], r, strings.Join(names, ", "), more)
	}
	row("failed", "%d", j.Failed)
	for _, n := range j.Failures {
		row("", "%s: %s", n.RunID, n.Reason)
	}
	if j.Failed > len(j.Failures) {
		row("", "... and %d more", j.Failed-len(j.Failures))
	}
	if !j.StartedAt.IsZero() {
		end := time.Now()
		if !j.EndedAt.IsZero() {
			end = j.EndedAt
		}
		row("rate", "%.1f/s over %s (limit %g/s, burst %d)", j.Rate(end), end.Sub(j.StartedAt).Round(time.Millisecond),
			j.Spec.EffectiveRate(), batch.BurstFor(j.Spec.EffectiveRate()))
	} else {
		row("rate", "limit %g/s, burst %d", j.Spec.EffectiveRate(), batch.BurstFor(j.Spec.EffectiveRate()))
	}
	row("created", "%s", j.CreatedAt.Format(time.RFC3339Nano))
	if !j.StartedAt.IsZero() {
		row("started", "%s", j.StartedAt.Format(time.RFC3339Nano))
	}
	if !j.EndedAt.IsZero() {
		row("ended", "%s (%s)", j.EndedAt.Format(time.RFC3339Nano), j.EndedAt.Sub(j.CreatedAt).Round(time.Millisecond))
	}
	if j.StopReason != "" {
		row("stop", "%s", j.StopReason)
	}
	if j.Error != "" {
		row("error", "%s", j.Error)
	}
	if j.Executor != "" {
		row("executor", "%s", j.Executor)
	}
	_ = tw.Flush()
}

// startBatch creates the job of spec (or, dryRun, counts its runs) and prints it.
func (e *env) startBatch(c *cobra.Command, client *flow.Client, spec flow.BatchSpec, id string, dryRun, wait bool, sample int) error {
	op := spec.Op
	if dryRun {
		dr, err := client.Batches().DryRun(c.Context(), spec, sample)
		if err != nil {
			return err
		}
		if e.json {
			return writeJSON(e.stdout, map[string]any{"dry_run": true, "matches": dr.Matches, "sample": dr.Sample})
		}
		fmt.Fprintf(e.stdout, "%d run(s) match; nothing was created\n", dr.Matches)
		for _, id := range dr.Sample {
			fmt.Fprintf(e.stdout, "  %s\n", id)
		}
		if len(dr.Sample) < dr.Matches {
			fmt.Fprintf(e.stdout, "  ... and %d more\n", dr.Matches-len(dr.Sample))
		}
		return nil
	}
	j, err := client.Batches().Start(c.Context(), spec, &flow.BatchOptions{ID: id})
	if err != nil {
		return err
	}
	if wait {
		if j, err = client.Batches().Await(c.Context(), j.ID); err != nil {
			return err
		}
	}
	if e.json {
		return writeJSON(e.stdout, j)
	}
	if !wait {
		fmt.Fprintf(e.stdout, "batch job %s created: %s the runs where %s, at %g/s\nfollow it with: flow batch status %s\n",
			j.ID, op, j.Spec.Where, j.Spec.EffectiveRate(), j.ID)
		return nil
	}
	printBatch(e.stdout, j)
	return nil
}
