package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/wait"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

func (e *env) startCmd() *cobra.Command {
	var id, input string
	var attrs []string
	var wait bool
	var timeout time.Duration
	var policies startPolicyFlags
	var timeouts timeoutFlags
	cmd := &cobra.Command{
		Use:   "start DEFINITION",
		Short: "Start a run of a workflow definition",
		Long: `Start a run of a workflow definition published by a worker of the queue, and print its ID.
With --wait, print the run's ID at once, then its events as they are committed (following the
runs it continues as), then its output once it ends; a run that fails, is cancelled or is
blocked exits with status 1.

With --wait --json, print JSON lines: one object per event, as 'flow history --json' prints
them ({"run_id","seq","time","type","data"}), then one result object:

  {"type":"result","run_id":RUN,"status":"completed","output":OUTPUT}
  {"type":"result","run_id":RUN,"status":"failed","error":MESSAGE}

where status is the final run's status (completed, failed, cancelled or blocked) and is left
out when the wait itself failed (a --timeout, a lost connection); error is set whenever the
run did not complete. Without --wait, --json prints {"run_id":RUN}.

Starting an existing run ID again with the same definition and input returns that run; with a
different input it is an error. Start policies change that (docs/start-policies.md):
--on-conflict for an active run of the ID, --reuse for an ended one (a new run RUN=_N, which the
ID then addresses), --delay, --dedup-key/--dedup-window and --debounce-key/--debounce-period.
The ID printed is the run's own.`,
		Example: `  flow start order --wait
  flow start fanout --input '{"items":20}' --id fanout-1
  flow start reminder --input '{"who":"ann","after":"30s"}'
  flow start order --attr customer=c-42 --attr amount=120 --attr tags=eu,vip
  flow start order --id order-7 --on-conflict terminate_existing
  flow start order --id nightly --reuse allow --delay 10m
  flow start order --dedup-key invoice-42 --dedup-window 1h`,
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
			opts := &flow.StartOptions{RunID: id}
			if err := policies.apply(opts); err != nil {
				return err
			}
			if err := timeouts.apply(opts); err != nil {
				return err
			}
			ctx := c.Context()
			client, err := e.client(ctx)
			if err != nil {
				return err
			}
			defer client.Close()
			startAttrs, err := attrFlags(attrs)
			if err != nil {
				return err
			}
			opts.Attributes = startAttrs
			runID, err := client.Start(ctx, a[0], in, opts)
			if err != nil {
				return err
			}
			if !wait {
				return e.answer(map[string]string{"run_id": runID}, "%s", runID)
			}
			if timeout > 0 {
				var cancel func()
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			if !e.json {
				fmt.Fprintf(e.stdout, "run %s\n", runID)
			}
			out, err := e.waitFollowing(ctx, client, runID)
			if timeout > 0 && errors.Is(err, context.DeadlineExceeded) && c.Context().Err() == nil {
				err = fmt.Errorf("run %s did not end within --timeout %s; it goes on: follow it with `flow watch %s`", runID, timeout, runID)
			}
			if e.json {
				res := map[string]any{"type": "result", "run_id": runID}
				var runErr *flow.RunError
				switch {
				case err == nil:
					res["status"], res["output"] = flow.StatusCompleted, out
				case errors.As(err, &runErr):
					res["status"], res["error"] = runErr.Status, err.Error()
				default:
					res["error"] = err.Error()
				}
				if werr := writeJSONLine(e.stdout, res); werr != nil {
					return werr
				}
				return err
			}
			var runErr *flow.RunError
			if errors.As(err, &runErr) {
				return fmt.Errorf("%w; see `flow history %s`", err, runID)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "completed: %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "run ID: letters, digits, '-' or '_' (default: generated)")
	cmd.Flags().StringVar(&input, "input", "", "input as JSON (default: null)")
	cmd.Flags().BoolVar(&wait, "wait", false, "print the run's events as they are committed, then its output once it ends")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --wait, give up after this long (default: no limit)")
	cmd.Flags().StringArrayVar(&attrs, "attr", nil, "a search attribute the run starts with, NAME=VALUE (repeatable); the value is read as the type the definition declares: text, an integer, a number, true/false, an RFC 3339 time or date, or comma-separated keywords")
	policies.add(cmd)
	timeouts.add(cmd)
	return cmd
}

// streamGrace bounds how long `start --wait` waits, once the run's result is known, for its
// event stream to print the events that led to it. The stream reads the same store as the
// result, so it normally catches up within a second; the bound keeps a stalled read from
// holding back the result.
const streamGrace = 10 * time.Second

// successorPause is how long the event stream of `start --wait` waits before looking again for
// a successor run that is not started yet (the engine starts it just after the commit that
// continued its predecessor).
const successorPause = 50 * time.Millisecond

// waitFollowing waits for the result of run runID as Client.Result does (following its
// continuations), and meanwhile prints the events of the run and of the runs it continues as,
// as they are committed. Once the result is known it lets the stream print the events through
// the one that ended or blocked the run (for at most streamGrace), then stops it: nothing is
// printed after waitFollowing returns, so the caller may print the result.
func (e *env) waitFollowing(ctx context.Context, client *flow.Client, runID string) (json.RawMessage, error) {
	f := &follower{e: e, moved: make(chan struct{}, 1)}
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	streamed := make(chan error, 1)
	go func() { streamed <- f.follow(streamCtx, client, runID) }()

	var out json.RawMessage
	err := client.Result(ctx, runID, &out)
	var runErr *flow.RunError
	isRunErr := errors.As(err, &runErr)
	var streamErr error
	streamDone := false
	if err == nil || isRunErr && (runErr.Status.Terminal() || runErr.Status == flow.StatusBlocked) {
		grace := time.NewTimer(streamGrace)
		defer grace.Stop()
	catchUp:
		for {
			if isRunErr && runErr.Status == flow.StatusBlocked && f.printedBlock(runErr.RunID) {
				break
			}
			select {
			case streamErr = <-streamed:
				streamDone = true
				break catchUp
			case <-f.moved:
			case <-grace.C:
				break catchUp
			case <-ctx.Done():
				break catchUp
			}
		}
	}
	stopStream()
	if !streamDone {
		streamErr = <-streamed
	}
	if streamErr != nil && !errors.Is(streamErr, context.Canceled) && !errors.Is(streamErr, context.DeadlineExceeded) {
		fmt.Fprintf(e.stderr, "flow: warning: stopped showing the events of run %s: %v (`flow history %s` shows them all)\n", runID, streamErr, runID)
	}
	return out, err
}

// follower prints the events of a run and of the runs it continues as, as they are committed.
type follower struct {
	e *env
	// moved receives (without blocking the follower) after each event printed.
	moved chan struct{}

	mu sync.Mutex
	// last is the latest event printed.
	last event.Envelope
}

// follow prints the events of run runID from its first, and those of its successors, until it
// has printed the terminal event of a run that did not continue as new (then it returns nil),
// printing fails, or ctx ends.
func (f *follower) follow(ctx context.Context, client *flow.Client, runID string) error {
	successor := false
	for {
		next := ""
		err := client.Watch(ctx, runID, 0, func(ev event.Envelope) error {
			if err := f.e.printEvent(ev); err != nil {
				return err
			}
			if p, ok := ev.Payload.(*event.RunContinuedAsNew); ok {
				next = p.SuccessorRunID
			}
			f.mu.Lock()
			f.last = ev
			f.mu.Unlock()
			select {
			case f.moved <- struct{}{}:
			default:
			}
			return nil
		})
		if successor && errors.Is(err, flow.ErrNotFound) {
			// The engine starts a successor just after its predecessor's last commit, and
			// Watch printed nothing of it: look again.
			if !wait.For(ctx, successorPause) {
				return ctx.Err()
			}
			continue
		}
		if err != nil || next == "" {
			return err
		}
		runID, successor = next, true
	}
}

// printedBlock reports whether the latest event printed is a decision.failed of run runID: the
// event that blocked it, as far as the stream has read.
func (f *follower) printedBlock(runID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last.RunID == runID && f.last.Type() == event.TypeDecisionFailed
}

func (e *env) statusCmd() *cobra.Command {
	var at uint64
	var secrets bool
	cmd := &cobra.Command{
		Use:   "status RUN",
		Short: "Show a run's status, steps and waits, now or as of any event",
		Long: `Show the snapshot projected from a run's history: status, steps with attempts, waits, signals,
hooks, children and the outcome, with why the run is parked if it is. --at SEQ shows the run as it
was right after event SEQ (see 'flow history RUN' for the sequences). --json prints the snapshot.

Hook tokens (and the text of a step that carries one, such as a callback URL) are shown
redacted; --secrets shows them, read from the history service's HTTP API (FLOW_HISTORY_URL,
default http://127.0.0.1:8420) with the bearer token of FLOW_TOKEN, else of .flow/token
($FLOW_DIR/token), which flow dev writes.`,
		Example: `  flow status order-2026-0001
  flow status order-2026-0001 --at 3
  flow status webhook-run --secrets`,
		Args: args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			var d *flow.RunDescription
			var err error
			if secrets {
				d, err = describeWithSecrets(c.Context(), a[0], at)
			} else {
				d, err = client.Describe(c.Context(), a[0], at)
			}
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
			if at == 0 {
				printLatest(c.Context(), e.stdout, client, d.Snapshot)
			}
			for _, w := range d.StepWaits {
				fmt.Fprintf(e.stdout, "Waiting     step %s (%s) attempt %d since %s: %s\n", w.StepID, w.Name, w.Attempt,
					w.Since.Format(time.RFC3339Nano), w.Why)
			}
			if d.Entry != nil && at == 0 {
				if d.Entry.Parked != "" {
					fmt.Fprintf(e.stdout, "Parked      %s (`flow resume %s` dispatches it again)\n", d.Entry.Parked, a[0])
				}
				if d.Entry.Damaged != "" && d.Damage == nil {
					fmt.Fprintf(e.stdout, "Damaged     %s\n", d.Entry.Damaged)
				}
			}
			if d.Damage != nil {
				printDamage(e.stdout, a[0], d.Damage)
			}
			return nil
		}),
	}
	cmd.Flags().Uint64Var(&at, "at", 0, "show the run as of this event sequence (default: the latest)")
	cmd.Flags().BoolVar(&secrets, "secrets", false, "show hook tokens, read over HTTP with the bearer token of FLOW_TOKEN or .flow/token (env FLOW_HISTORY_URL)")
	return cmd
}

// printDamage says why run runID's history is damaged, what the status above shows of it, and
// how to release it.
func printDamage(w io.Writer, runID string, d *flow.RunDamage) {
	state := "not quarantined yet"
	if d.Quarantined {
		state = "quarantined: no worker drives it"
	}
	fmt.Fprintf(w, "Damaged     %s\n", d.Reason)
	fmt.Fprintf(w, "            the history is valid through seq %d, shown above; %s\n", d.ValidThrough, state)
	fmt.Fprintf(w, "            go on from seq %d: flow resume %s --accept-damage; end it there: flow terminate %s\n", d.ValidThrough, runID, runID)
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
	printResets(w, s)
	if s.Blocked != nil {
		fmt.Fprintf(w, "Blocked     %s at seq %d: %s\n", s.Blocked.Kind, s.Blocked.Seq, s.Blocked.Detail)
	}
	if s.CancelRequested {
		fmt.Fprintf(w, "Cancel      requested: %s\n", s.CancelReason)
	}
	printPause(w, s)
	printStartPolicy(w, s)
	printTimeouts(w, s)
	if s.Priority != 0 {
		fmt.Fprintf(w, "Priority    %d\n", s.Priority)
	}
	if s.Control != nil {
		fmt.Fprintf(w, "Control     %s\n", s.Control.Describe())
		switch {
		case s.Queued():
			fmt.Fprintf(w, "Queued      waiting for admission since %s (the scheduler's admission controller admits it once its limits allow)\n",
				s.StartedAt.Format(time.RFC3339Nano))
		case s.Admitted:
			fmt.Fprintf(w, "Admitted    at seq %d, %s\n", s.AdmittedSeq, s.AdmittedAt.Format(time.RFC3339Nano))
		}
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
		steps := make([]*flow.RunStep, 0, len(s.Steps))
		for _, st := range s.Steps {
			steps = append(steps, st)
		}
		slices.SortFunc(steps, func(a, b *flow.RunStep) int {
			return cmp.Or(cmp.Compare(a.BatchSeq, b.BatchSeq), strings.Compare(a.ID, b.ID))
		})
		for _, st := range steps {
			result := ""
			switch {
			case st.Output != nil:
				result = truncate(string(st.Output), 60)
			case st.Error != nil:
				result = truncate(st.Error.Error(), 60)
			}
			status := string(st.Status)
			switch {
			case s.Terminal() && !st.Status.Settled():
				// History invariants settle every step before the end; say so if one did not.
				status, result = "unsettled", "the run ended without settling it"
			case st.Status == core.StepRetrying && !st.RetryDue.IsZero():
				result = "next attempt at " + st.RetryDue.Format(time.RFC3339Nano)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\n", st.ID, st.Name, status, st.Attempt, result)
		}
		_ = tw.Flush()
	}
	// A run that ended waits for nothing: what it never got is shown as such, not as pending.
	ended := s.Terminal()
	if len(s.Waits) > 0 {
		fmt.Fprintln(w, "\nWaits")
		waits := make([]*flow.RunWait, 0, len(s.Waits))
		for _, wt := range s.Waits {
			waits = append(waits, wt)
		}
		slices.SortFunc(waits, func(a, b *flow.RunWait) int { return cmp.Compare(a.Seq, b.Seq) })
		for _, wt := range waits {
			state := "pending until " + wt.Deadline.Format(time.RFC3339Nano)
			switch {
			case wt.Fired:
				state = "fired at seq " + fmt.Sprint(wt.FiredSeq)
			case ended:
				state = fmt.Sprintf("never fired (due %s; the run ended at seq %d)", wt.Deadline.Format(time.RFC3339Nano), s.Outcome.Seq)
			}
			fmt.Fprintf(w, "  %s  %s\n", wt.ID, state)
		}
	}
	signalWaits := make([]*flow.RunSignalWait, 0, len(s.SignalWaits))
	for _, sw := range s.SignalWaits {
		signalWaits = append(signalWaits, sw)
	}
	slices.SortFunc(signalWaits, func(a, b *flow.RunSignalWait) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, sw := range signalWaits {
		state := "waiting"
		switch {
		case sw.Received():
			state = "received"
		case ended:
			state = "never received (the run ended)"
		}
		fmt.Fprintf(w, "Signal wait %s (%s): %s\n", sw.ID, sw.Name, state)
	}
	hooks := make([]*flow.RunHook, 0, len(s.Hooks))
	for _, h := range s.Hooks {
		hooks = append(hooks, h)
	}
	slices.SortFunc(hooks, func(a, b *flow.RunHook) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, h := range hooks {
		state := "waiting"
		switch {
		case h.Received:
			state = fmt.Sprintf("received at seq %d", h.ReceivedSeq)
		case ended:
			state = "never received (the run ended)"
		}
		fmt.Fprintf(w, "Hook %s: token %s %s\n", h.ID, h.Token, state)
	}
	printUpdates(w, s, ended)
	children := make([]*flow.RunChild, 0, len(s.Children))
	for _, ch := range s.Children {
		children = append(children, ch)
	}
	slices.SortFunc(children, func(a, b *flow.RunChild) int {
		return cmp.Or(cmp.Compare(a.BatchSeq, b.BatchSeq), strings.Compare(a.ID, b.ID))
	})
	for _, ch := range children {
		state := "running"
		switch {
		case ch.Settled:
			state = string(ch.Outcome)
		case ended:
			// A child left by its parent's end goes on (or was cancelled) on its own.
			state = fmt.Sprintf("not settled when this run ended (see `flow status %s`)", ch.RunID)
		}
		fmt.Fprintf(w, "Child %s: run %s %s\n", ch.ID, ch.RunID, state)
	}
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	cut, i := 0, 0
	for i = range s {
		if cut == n-1 {
			break
		}
		cut++
	}
	return s[:i] + "…"
}

func (e *env) historyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "history RUN",
		Short: "Show a run's events in order",
		Long: `Show a run's committed events in order: sequence, recorded time (UTC, to the millisecond),
type and payload, cut to 160 characters with "…". --json prints one whole envelope per line,
the format flowtest.Replay and 'flow verify' read.`,
		Args: args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			hist, err := client.History(c.Context(), a[0], 0)
			if err != nil {
				return err
			}
			e.noteArchived(c.Context(), client, a[0]) // retention.go
			for _, ev := range hist {
				if err := e.printEvent(ev); err != nil {
					return err
				}
			}
			return nil
		}),
	}
}

// eventTime is how text output shows an event's recorded time: date, time to the millisecond
// and zone, always in UTC (as events are recorded), e.g. "2026-12-01 10:31:02.123 UTC".
const eventTime = "2006-01-02 15:04:05.000 MST"

// payloadWidth is the number of characters of an event's payload that text output shows; a
// longer payload ends in "…" (`flow history RUN --json` shows it whole).
const payloadWidth = 160

// printEvent prints one event: a JSON line (the envelope, as `flow history --json` writes it)
// with --json, else a line of its sequence, time, type and payload cut to payloadWidth.
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
	_, err = fmt.Fprintf(e.stdout, "%4d  %s  %-22s %s\n", ev.Seq, ev.Time.UTC().Format(eventTime), ev.Type(), truncate(string(data), payloadWidth))
	return err
}

func (e *env) watchCmd() *cobra.Command {
	var after uint64
	cmd := &cobra.Command{
		Use:   "watch RUN",
		Short: "Follow a run's events live until it ends",
		Long: `Print a run's events as they are committed, as 'flow history' prints them (with --json, one
envelope per line), until the run ends.`,
		Args: args("RUN"),
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
run first ('flow status RUN' shows its history as far as it is valid, and why the rest is not).
It goes on from its longest valid prefix: run.damage_accepted is recorded after it, and the
messages after the prefix are void (they stay in the stream, no part of the run's history). A
run whose valid prefix ended is released as it ended. 'flow terminate RUN' ends a damaged run
from the same prefix instead.`,
		Args: args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			res, err := client.Resume(c.Context(), a[0], &flow.ResumeOptions{AcceptDamage: acceptDamage})
			if err != nil {
				return err
			}
			return e.answer(res, "%s (%s at seq %d) dispatched to a worker", res.RunID, res.Status, res.Seq)
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
		Long: `Request cancellation of a run. A workflow that handles cancellation may clean up first;
one that does not is cancelled at its next decision, with its unsettled steps. --json prints
{"run_id":RUN,"delivered_to":RUN_OR_ITS_SUCCESSOR,"status":"accepted"}.`,
		Args: args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			to, err := client.Cancel(c.Context(), a[0], reason)
			if err != nil {
				return err
			}
			return e.answer(accepted(a[0], to), "cancellation of %s requested%s", a[0], forwarded(a[0], to))
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
		Long: `End a run as failed at once, whatever its code would decide; this works on blocked runs too,
and on runs whose history is damaged: they end from their longest valid prefix and are released
from quarantine (see 'flow resume --accept-damage').
--json prints {"run_id":RUN,"delivered_to":RUN_OR_ITS_SUCCESSOR,"status":"accepted"}.`,
		Args: args("RUN"),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, a []string) error {
			to, err := client.Terminate(c.Context(), a[0], reason)
			if err != nil {
				return err
			}
			return e.answer(accepted(a[0], to), "%s terminated%s", a[0], forwarded(a[0], to))
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
		Long: `Send a named signal with a JSON payload to a run (or, if it continued as new, to the latest
run it continued as). --json prints
{"run_id":RUN,"delivered_to":RUN_OR_ITS_SUCCESSOR,"status":"accepted"}.`,
		Args: args("RUN", "NAME"),
		RunE: e.withPayload(&payload, func(c *cobra.Command, client *flow.Client, a []string) error {
			to, err := client.Signal(c.Context(), a[0], a[1], json.RawMessage(payload), &flow.DeliveryOptions{DeliveryID: id})
			if err != nil {
				return err
			}
			return e.answer(accepted(a[0], to), "signal %s sent to %s%s", a[1], a[0], forwarded(a[0], to))
		}),
	}
	cmd.Flags().StringVar(&payload, "payload", "null", "payload as JSON")
	cmd.Flags().StringVar(&id, "id", "", "delivery ID; a repeated ID is delivered once (default: generated)")
	return cmd
}

// inputAccepted is what cancel, terminate and signal print with --json.
type inputAccepted struct {
	// RunID is the run the command named.
	RunID string `json:"run_id"`
	// DeliveredTo is the run that received the input: RunID, or the latest run it continued as.
	DeliveredTo string `json:"delivered_to"`
	// Status is "accepted": the input is recorded in DeliveredTo's history.
	Status string `json:"status"`
}

func accepted(asked, to string) inputAccepted {
	if to == "" {
		to = asked
	}
	return inputAccepted{RunID: asked, DeliveredTo: to, Status: "accepted"}
}

// forwarded says, when an input for run asked reached run to instead, that it was passed on.
func forwarded(asked, to string) string {
	if to == "" || to == asked {
		return ""
	}
	if strings.Contains(to, "=_reset-") {
		return fmt.Sprintf(" (forwarded to %s: %s was reset or continued as new)", to, asked)
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
		return fn(c, client, a)
	}
}

// withPayload is withClient for a command with a --payload flag: a payload that is not JSON is
// a usage error, found before dialing.
func (e *env) withPayload(payload *string, fn func(c *cobra.Command, client *flow.Client, a []string) error) func(*cobra.Command, []string) error {
	dial := e.withClient(fn)
	return func(c *cobra.Command, a []string) error {
		if err := checkPayload(*payload); err != nil {
			return err
		}
		return dial(c, a)
	}
}

// answer prints v as JSON with --json, else the line that format makes of args.
func (e *env) answer(v any, format string, args ...any) error {
	if e.json {
		return writeJSON(e.stdout, v)
	}
	fmt.Fprintf(e.stdout, format+"\n", args...)
	return nil
}

// writeJSONLine writes v as one line of JSON (for JSON lines output).
func writeJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
