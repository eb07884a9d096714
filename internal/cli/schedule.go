package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/pkg/flow"
)

// scheduleCmd is `flow schedule`: durable schedules (docs/schedules.md).
func (e *env) scheduleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Create, list, describe, pause, trigger, backfill and delete schedules",
		Long: `Schedules start runs of a definition at the slots of a cron expression in a time zone, or of a
fixed interval. The scheduler fires each slot exactly once: the run's ID is the schedule's name and
the slot (NAME-20260105T080000Z), and its run.started records both.

  flow schedule create report --cron '0 9 * * MON-FRI' --tz Europe/Berlin --definition report --input '{"region":"eu"}'
  flow schedule create sweep --every 15m --offset 5m --jitter 30s --definition sweep --overlap buffer_one
  flow schedule list
  flow schedule describe report --next 10
  flow schedule pause report --note "quarter close"; flow schedule unpause report
  flow schedule trigger report
  flow schedule backfill report --start 2026-01-05T00:00:00Z --end 2026-01-10T00:00:00Z
  flow schedule delete report`,
	}
	cmd.AddCommand(e.scheduleCreateCmd("create"), e.scheduleCreateCmd("update"), e.scheduleListCmd(), e.scheduleDescribeCmd(),
		e.schedulePauseCmd(true), e.schedulePauseCmd(false), e.scheduleTriggerCmd(), e.scheduleBackfillCmd(), e.scheduleDeleteCmd())
	return cmd
}

func (e *env) scheduleCreateCmd(verb string) *cobra.Command {
	var o flow.ScheduleConfig
	var input, overlap string
	short := "Create a schedule"
	if verb == "update" {
		short = "Change a schedule's spec, start and policies, keeping its state"
	}
	cmd := &cobra.Command{
		Use:   verb + " NAME (--cron EXPR [--tz ZONE] | --every DURATION [--offset DURATION]) --definition DEF",
		Short: short,
		Long: short + `. The first slot is the first after now.

--cron takes five fields (minute hour day-of-month month day-of-week; names such as MON-FRI, and
@hourly, @daily, @weekly, @monthly work), read as wall-clock time in --tz (default UTC). When clocks
go forward, a slot in the skipped hour fires once, at the first instant after the gap; when they
go back, a wall time that occurs twice fires once, at its first occurrence.
--every counts from the Unix epoch plus --offset (--every 1h --offset 15m: 00:15, 01:15, ... UTC).
--overlap says what to do with an action while a run of the schedule is active: skip (default),
buffer_one, buffer_all, cancel_other, terminate_other, allow_all.
--catchup-window: slots due longer ago than this when the scheduler gets to them (after downtime)
are recorded as missed, not started (default 1h).`,
		Args: args("NAME"),
		// The flags are checked before connecting: a usage error needs no NATS.
		PreRunE: func(*cobra.Command, []string) error {
			if input != "" {
				var v any
				if err := json.Unmarshal([]byte(input), &v); err != nil {
					return usageError{fmt.Errorf("--input is not valid JSON (%v); quote it for the shell, e.g. --input '{\"region\":\"eu\"}'", err)}
				}
				o.Input = json.RawMessage(input)
			}
			o.Overlap = flow.Overlap(overlap)
			if err := schedule.CheckOverlap(o.Overlap); err != nil {
				return usageError{fmt.Errorf("--overlap %q is not one of skip, buffer_one, buffer_all, cancel_other, terminate_other, allow_all", overlap)}
			}
			if o.Definition == "" {
				return usageError{fmt.Errorf("--definition is required: the workflow each run starts, e.g. --definition report")}
			}
			if (o.Cron == "") == (o.Every == 0) {
				return usageError{fmt.Errorf("give either --cron (e.g. --cron '0 9 * * MON-FRI' --tz Europe/Berlin) or --every (e.g. --every 15m)")}
			}
			return nil
		},
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			o.Queue = e.queue
			var d *flow.ScheduleDescription
			var err error
			if verb == "update" {
				d, err = client.Schedules().Update(c.Context(), a[0], o)
			} else {
				d, err = client.Schedules().Create(c.Context(), a[0], o)
			}
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, d)
			}
			past := "created"
			if verb == "update" {
				past = "updated"
			}
			fmt.Fprintf(e.stdout, "schedule %s %s (%s)\n", a[0], past, describeSpec(d.Schedule.Spec))
			printNext(e.stdout, d.Next)
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Cron, "cron", "", "cron expression, five fields, e.g. '0 9 * * MON-FRI'")
	fl.StringVar(&o.TZ, "tz", "", "IANA time zone of --cron, e.g. Europe/Berlin (default UTC)")
	fl.DurationVar(&o.Every, "every", 0, "fixed interval instead of --cron, e.g. 15m")
	fl.DurationVar(&o.Offset, "offset", 0, "offset of --every from the epoch, e.g. 5m")
	fl.DurationVar(&o.Jitter, "jitter", 0, "delay each slot's start by a random amount up to this, the same for the same slot")
	fl.StringVar(&o.Definition, "definition", "", "the workflow definition each run starts")
	fl.StringVar(&input, "input", "", "JSON input of each run")
	fl.StringVar(&overlap, "overlap", "", "overlap policy: skip, buffer_one, buffer_all, cancel_other, terminate_other, allow_all (default skip)")
	fl.DurationVar(&o.CatchupWindow, "catchup-window", 0, "how late a slot may still start after downtime (default 1h)")
	fl.BoolVar(&o.Paused, "paused", false, "create it paused")
	fl.StringVar(&o.Note, "note", "", "a note on the pause")
	return cmd
}

func describeSpec(s schedule.Spec) string {
	var parts []string
	if s.Cron != "" {
		tz := s.TZ
		if tz == "" {
			tz = "UTC"
		}
		parts = append(parts, fmt.Sprintf("cron %q in %s", s.Cron, tz))
	} else {
		p := "every " + time.Duration(s.Every).String()
		if s.Offset != 0 {
			p += " offset " + time.Duration(s.Offset).String()
		}
		parts = append(parts, p)
	}
	if s.Jitter != 0 {
		parts = append(parts, "jitter "+time.Duration(s.Jitter).String())
	}
	return strings.Join(parts, ", ")
}

func printNext(w io.Writer, next []schedule.Action) {
	if len(next) == 0 {
		return
	}
	fmt.Fprintln(w, "Next actions:")
	for _, a := range next {
		at := ""
		if !a.At.Equal(a.Slot) {
			at = " (fires " + a.At.Format(time.RFC3339) + ")"
		}
		fmt.Fprintf(w, "  %s%s  %s\n", a.Slot.Format(time.RFC3339), at, a.RunID)
	}
}

func (e *env) scheduleListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List schedules with their state and next action",
		Args:  args(),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, _ []string) error {
			list, err := client.Schedules().List(c.Context())
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(e.stdout, "no schedules; create one with `flow schedule create NAME --cron '0 9 * * *' --definition DEF`")
				return nil
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSPEC\tDEFINITION\tOVERLAP\tSTATE\tSTARTED\tNEXT")
			for _, d := range list {
				s := d.Schedule
				state := "active"
				if s.State.Paused {
					state = "paused"
				}
				next := "-"
				if len(d.Next) > 0 {
					next = d.Next[0].At.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.Name, describeSpec(s.Spec), s.Definition, s.Overlap.Or(schedule.Skip), state, s.State.Started, next)
			}
			return tw.Flush()
		}),
	}
}

func (e *env) scheduleDescribeCmd() *cobra.Command {
	var next int
	cmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a schedule: spec, state, recent actions (slot, run ID, outcome) and the next action times",
		Args:  args("NAME"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			d, err := client.Schedules().Describe(c.Context(), a[0], next)
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, d)
			}
			printSchedule(e.stdout, d)
			return nil
		}),
	}
	cmd.Flags().IntVar(&next, "next", 5, "how many next action times to list (at most 100)")
	return cmd
}

func printSchedule(w io.Writer, d *flow.ScheduleDescription) {
	s := d.Schedule
	st := s.State
	fmt.Fprintf(w, "Schedule    %s\n", s.Name)
	fmt.Fprintf(w, "Spec        %s\n", describeSpec(s.Spec))
	input := string(s.Input)
	if input == "" {
		input = "null"
	}
	queue := s.Queue
	if queue == "" {
		queue = "default"
	}
	fmt.Fprintf(w, "Starts      %s on queue %s, input %s\n", s.Definition, queue, input)
	cw := time.Duration(s.CatchupWindow)
	if cw == 0 {
		cw = schedule.DefaultCatchupWindow
	}
	fmt.Fprintf(w, "Policies    overlap %s, catch-up window %s\n", s.Overlap.Or(schedule.Skip), cw)
	state := "active"
	if st.Paused {
		state = "paused"
	}
	if st.Note != "" {
		state += fmt.Sprintf(" (note: %s)", st.Note)
	}
	fmt.Fprintf(w, "State       %s; %d started, %d skipped, %d missed, %d failed\n", state, st.Started, st.Skipped, st.Missed, st.Failed)
	if len(st.Running) > 0 {
		running := make([]string, len(st.Running))
		for i, id := range st.Running {
			running[i] = id
			if cur := st.CurrentRun(id); cur != id {
				running[i] += " (now " + cur + ")"
			}
		}
		fmt.Fprintf(w, "Running     %s\n", strings.Join(running, ", "))
	}
	for _, b := range st.Buffered {
		fmt.Fprintf(w, "Buffered    %s %s (%s)\n", b.Slot.Format(time.RFC3339), b.RunID, b.Kind)
	}
	for _, r := range st.Requests {
		if r.Kind == "trigger" {
			fmt.Fprintf(w, "Pending     trigger at %s\n", r.At.Format(time.RFC3339Nano))
		} else {
			fmt.Fprintf(w, "Pending     backfill %s..%s\n", r.Start.Format(time.RFC3339), r.End.Format(time.RFC3339))
		}
	}
	if len(st.Recent) > 0 {
		fmt.Fprintln(w, "Recent actions:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SLOT\tACTION\tRUN\tOUTCOME")
		for _, a := range st.Recent {
			outcome := string(a.Outcome)
			if a.Count > 1 {
				outcome += fmt.Sprintf(" (%d slots, to %s)", a.Count, a.Until.Format(time.RFC3339))
			}
			if a.Detail != "" {
				outcome += ": " + a.Detail
			}
			run := a.RunID
			if run == "" {
				run = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", a.Slot.Format(time.RFC3339), a.Kind, run, outcome)
		}
		_ = tw.Flush()
	}
	printNext(w, d.Next)
}

func (e *env) schedulePauseCmd(pause bool) *cobra.Command {
	var note string
	use, short := "pause NAME", "Pause a schedule: its slots are recorded as paused, not started (triggers and backfills still act)"
	if !pause {
		use, short = "unpause NAME", "Unpause a schedule; the slots missed while paused are not caught up"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args("NAME"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			var err error
			if pause {
				err = client.Schedules().Pause(c.Context(), a[0], note)
			} else {
				err = client.Schedules().Unpause(c.Context(), a[0], note)
			}
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, map[string]any{"name": a[0], "paused": pause, "note": note})
			}
			if pause {
				fmt.Fprintf(e.stdout, "schedule %s paused\n", a[0])
			} else {
				fmt.Fprintf(e.stdout, "schedule %s unpaused\n", a[0])
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&note, "note", "", "why, shown by describe")
	return cmd
}

func (e *env) scheduleTriggerCmd() *cobra.Command {
	var o flow.TriggerOptions
	var overlap string
	cmd := &cobra.Command{
		Use:   "trigger NAME",
		Short: "Ask a schedule for an action now, under its overlap policy (or --overlap)",
		Args:  args("NAME"),
		PreRunE: func(*cobra.Command, []string) error {
			o.Overlap = flow.Overlap(overlap)
			if err := schedule.CheckOverlap(o.Overlap); err != nil {
				return usageError{fmt.Errorf("--overlap %q is not one of skip, buffer_one, buffer_all, cancel_other, terminate_other, allow_all", overlap)}
			}
			return nil
		},
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			d, err := client.Schedules().Trigger(c.Context(), a[0], &o)
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, d)
			}
			if !d.Accepted {
				fmt.Fprintf(e.stdout, "trigger %s of schedule %s was taken already\n", d.RequestID, a[0])
			} else {
				fmt.Fprintf(e.stdout, "schedule %s triggered: run %s (see `flow schedule describe %s`)\n", a[0], d.TriggerRunID, a[0])
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&overlap, "overlap", "", "overlap policy for this action (default: the schedule's)")
	cmd.Flags().StringVar(&o.RequestID, "request-id", "", "idempotency key: a repeat is taken once")
	return cmd
}

func (e *env) scheduleBackfillCmd() *cobra.Command {
	var o flow.TriggerOptions
	var overlap, start, end string
	var from, to time.Time
	cmd := &cobra.Command{
		Use:   "backfill NAME --start TIME --end TIME",
		Short: "Start the schedule's runs for its slots in [start, end), in order, under its overlap policy (or --overlap)",
		Args:  args("NAME"),
		PreRunE: func(*cobra.Command, []string) error {
			var err error
			if from, err = time.Parse(time.RFC3339, start); err != nil {
				return usageError{fmt.Errorf("--start %q is not an RFC 3339 time such as 2026-01-05T00:00:00Z", start)}
			}
			if to, err = time.Parse(time.RFC3339, end); err != nil {
				return usageError{fmt.Errorf("--end %q is not an RFC 3339 time such as 2026-01-10T00:00:00Z", end)}
			}
			o.Overlap = flow.Overlap(overlap)
			if err := schedule.CheckOverlap(o.Overlap); err != nil {
				return usageError{fmt.Errorf("--overlap %q is not one of skip, buffer_one, buffer_all, cancel_other, terminate_other, allow_all", overlap)}
			}
			return nil
		},
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			d, err := client.Schedules().Backfill(c.Context(), a[0], from, to, &o)
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, d)
			}
			if !d.Accepted {
				fmt.Fprintf(e.stdout, "backfill %s of schedule %s was taken already\n", d.RequestID, a[0])
				return nil
			}
			fmt.Fprintf(e.stdout, "backfill of schedule %s from %s to %s accepted (see `flow schedule describe %s`)\n", a[0],
				from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), a[0])
			return nil
		}),
	}
	cmd.Flags().StringVar(&start, "start", "", "first time of the range, RFC 3339 (included)")
	cmd.Flags().StringVar(&end, "end", "", "end of the range, RFC 3339 (excluded; not in the future)")
	cmd.Flags().StringVar(&overlap, "overlap", "", "overlap policy for these actions (default: the schedule's)")
	cmd.Flags().StringVar(&o.RequestID, "request-id", "", "idempotency key: a repeat is taken once (letters, digits, '-', '_'; at most 32)")
	return cmd
}

func (e *env) scheduleDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule (the runs it started are left alone)",
		Args:  args("NAME"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			if err := client.Schedules().Delete(c.Context(), a[0]); err != nil {
				return err
			}
			return e.answer(map[string]any{"name": a[0], "deleted": true}, "schedule %s deleted", a[0])
		}),
	}
}
