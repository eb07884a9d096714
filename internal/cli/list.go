package cli

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/flow"
)

func (e *env) runsCmd() *cobra.Command {
	var f flow.RunsFilter
	var status, since, until string
	var all bool
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List runs with their status, most recently updated first",
		Long: `List runs from the runs index, most recently updated first, a page at a time. Filters combine:
--status (one or several, comma-separated), --definition, --queue, --build, --parent, --since and
--until (when the run started: an RFC 3339 time, a date, or a duration back from now such as 2h),
--parked (blocked, or waiting for a worker of their build or definition). The STATUS SINCE column is
the event at which the run entered its status. A page ends with the command for the next one.`,
		Example: `  flow runs
  flow runs --status running,suspended --definition order
  flow runs --since 2h --parked
  flow runs --all --json`,
		Args: args(),
		// The flags are checked before dialling: a usage error is one whether or not NATS answers.
		PreRunE: func(c *cobra.Command, _ []string) error {
			var err error
			if f.Status, err = statuses(status); err != nil {
				return err
			}
			if f.Limit < 1 || f.Limit > api.MaxListLimit {
				return usageError{fmt.Errorf("--limit must be from 1 to %d runs per page, got %d (use --all for every page)", api.MaxListLimit, f.Limit)}
			}
			if c.Flags().Changed("queue") {
				f.Queue = e.queue
			}
			if f.Since, err = when("--since", since); err != nil {
				return err
			}
			f.Until, err = when("--until", until)
			return err
		},
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, _ []string) error {
			var runs []flow.RunSummary
			next := ""
			for {
				page, err := client.Runs(c.Context(), &f)
				if err != nil {
					return err
				}
				runs = append(runs, page.Runs...)
				next = page.Next
				if !all || next == "" {
					break
				}
				f.Cursor = next
			}
			if e.json {
				if runs == nil {
					runs = []flow.RunSummary{}
				}
				return writeJSON(e.stdout, runs)
			}
			if len(runs) == 0 {
				if f.Cursor == "" && len(f.Status) == 0 && f.Definition == "" && f.Queue == "" && f.Build == "" && f.Parent == "" &&
					f.Since.IsZero() && f.Until.IsZero() && !f.Parked && f.Where == "" {
					fmt.Fprintln(e.stdout, "No runs yet. Start one with: flow start order --wait")
				} else {
					fmt.Fprintln(e.stdout, "No runs match.")
				}
				return nil
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			withAttrs := slices.ContainsFunc(runs, func(r flow.RunSummary) bool { return len(r.Attributes) > 0 })
			if withAttrs {
				fmt.Fprintln(tw, "RUN\tDEFINITION\tSTATUS\tSINCE\tUPDATED\tATTRIBUTES\tDETAIL")
			} else {
				fmt.Fprintln(tw, "RUN\tDEFINITION\tSTATUS\tSINCE\tUPDATED\tDETAIL")
			}
			for _, r := range runs {
				detail := r.Detail
				status := string(r.Status)
				switch {
				case r.Damaged != "":
					// Never shown as healthy: what the index last knew is only the detail.
					status, detail = "DAMAGED", fmt.Sprintf("(was %s) %s", r.Status, r.Damaged)
				case r.Parked != "":
					detail = "parked: " + r.Parked
				case r.Deleted != nil:
					detail = deletedText(r.Deleted) // retention.go
				}
				if withAttrs {
					fmt.Fprintf(tw, "%s\t%s\t%s\tseq %d\t%s\t%s\t%s\n", r.RunID, r.Definition, status, r.Seq, r.UpdatedAt.Format(time.RFC3339),
						truncate(attrText(r.Attributes), 60), truncate(detail, 70))
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\tseq %d\t%s\t%s\n", r.RunID, r.Definition, status, r.Seq, r.UpdatedAt.Format(time.RFC3339), truncate(detail, 70))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(e.stdout, "More: flow runs --cursor %s (with the same filters), or --all\n", next)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&status, "status", "", "only runs in these statuses, comma-separated: "+statusNames())
	cmd.Flags().StringVar(&f.Definition, "definition", "", "only runs of this workflow definition")
	cmd.Flags().StringVar(&f.Build, "build", "", "only runs pinned to this build ID")
	cmd.Flags().StringVar(&f.Parent, "parent", "", "only child runs of this run")
	cmd.Flags().StringVar(&since, "since", "", "only runs started at or after this time (RFC 3339, a date, or a duration back from now such as 2h)")
	cmd.Flags().StringVar(&until, "until", "", "only runs started before this time (as --since)")
	cmd.Flags().BoolVar(&f.Parked, "parked", false, "only runs no worker drives now (blocked, or waiting for a worker of their build or definition)")
	cmd.Flags().IntVar(&f.Limit, "limit", 50, fmt.Sprintf("runs per page, from 1 to %d", api.MaxListLimit))
	cmd.Flags().StringVar(&f.Cursor, "cursor", "", "continue after the page that printed this cursor")
	cmd.Flags().StringVar(&f.Where, "where", "", `only runs a filter selects, e.g. 'customer = "c-42" and status = "running" and started > "2026-12-01"' (see docs/search.md)`)
	cmd.Flags().BoolVar(&all, "all", false, "list every page")
	cmd.Flags().BoolVar(&f.IncludeDeleted, "include-deleted", false, "list the tombstones of runs deleted after their retention period too (docs/retention.md)")
	return cmd
}

// runStatuses are the statuses a run can have, in the order of its life.
var runStatuses = []flow.Status{
	flow.StatusPending, flow.StatusRunning, flow.StatusSuspended, flow.StatusCancelling, flow.StatusBlocked,
	flow.StatusCompleted, flow.StatusFailed, flow.StatusCancelled, flow.StatusContinuedAsNew, flow.StatusQueued,
	flow.StatusPaused,
}

func statusNames() string {
	names := make([]string, len(runStatuses))
	for i, s := range runStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// statuses parses the --status flag: "" (any status) or statuses separated by commas, spaces
// around them ignored. Anything else is a usage error naming the valid statuses.
func statuses(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(runStatuses, flow.Status(s)) {
			return nil, usageError{fmt.Errorf("--status %q is not a run status; use one or several of %s, comma-separated", s, statusNames())}
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// when parses a time flag: RFC 3339, a date (2006-01-02, in UTC), or a duration back from now.
func when(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return time.Now().Add(-d).UTC(), nil
	}
	return time.Time{}, usageError{fmt.Errorf("%s must be an RFC 3339 time (2026-12-01T09:00:00Z), a date (2026-12-01) or a duration such as 2h, got %q", flag, v)}
}
