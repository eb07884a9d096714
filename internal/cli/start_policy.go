package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/pkg/flow"
)

// startPolicyFlags are the start policy flags of `flow start` (docs/start-policies.md).
type startPolicyFlags struct {
	onConflict, reuse, dedupKey, debounceKey string
	delay, dedupWindow, debouncePeriod       time.Duration
}

func (f *startPolicyFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.onConflict, "on-conflict", "", "when the run ID's latest run is active: fail, use_existing or terminate_existing (default: fail)")
	fl.StringVar(&f.reuse, "reuse", "", "when the run ID's latest run ended: refuse, allow or allow_failed_only (default: refuse)")
	fl.DurationVar(&f.delay, "delay", 0, "start the run after this long (its first decision waits; it holds no worker)")
	fl.StringVar(&f.dedupKey, "dedup-key", "", "with --dedup-window: a start with the same key within the window returns the first's run")
	fl.DurationVar(&f.dedupWindow, "dedup-window", 0, "the window of --dedup-key, e.g. 1h")
	fl.StringVar(&f.debounceKey, "debounce-key", "", "with --debounce-period: starts with the same key collapse into one run, started after the quiet period with the latest input")
	fl.DurationVar(&f.debouncePeriod, "debounce-period", 0, "the quiet period of --debounce-key, e.g. 30s")
}

// apply sets the policies on o, refusing flags that cannot work together.
func (f *startPolicyFlags) apply(o *flow.StartOptions) error {
	o.OnConflict, o.Reuse = flow.ConflictPolicy(f.onConflict), flow.ReusePolicy(f.reuse)
	switch {
	case !o.OnConflict.Valid():
		return usageError{fmt.Errorf("--on-conflict %q is not one of fail, use_existing, terminate_existing", f.onConflict)}
	case !o.Reuse.Valid():
		return usageError{fmt.Errorf("--reuse %q is not one of refuse, allow, allow_failed_only", f.reuse)}
	case (f.dedupKey == "") != (f.dedupWindow == 0):
		return usageError{fmt.Errorf("--dedup-key and --dedup-window go together, e.g. --dedup-key invoice-42 --dedup-window 1h")}
	case (f.debounceKey == "") != (f.debouncePeriod == 0):
		return usageError{fmt.Errorf("--debounce-key and --debounce-period go together, e.g. --debounce-key doc-9 --debounce-period 30s")}
	}
	o.Delay, o.DedupKey, o.DedupWindow = f.delay, f.dedupKey, f.dedupWindow
	if f.debounceKey != "" {
		o.Debounce = &flow.Debounce{Key: f.debounceKey, Period: f.debouncePeriod}
	}
	return nil
}

// printStartPolicy prints what the run's start policies did, and its start delay.
func printStartPolicy(w io.Writer, s *flow.Snapshot) {
	if s.Delayed {
		fmt.Fprintf(w, "Delayed     until %s (no decision before then)\n", s.NotBefore.Format(time.RFC3339Nano))
	}
	if sc := s.Schedule; sc != nil {
		fmt.Fprintf(w, "Schedule    %s, slot %s (%s; `flow schedule describe %s`)\n", sc.Name, sc.Slot.Format(time.RFC3339Nano), sc.Action, sc.Name)
	}
	sp := s.StartPolicy
	if sp == nil {
		return
	}
	if sp.Previous != "" {
		how := "reuses the ID " + sp.RunID + " after run " + sp.Previous + " ended"
		if sp.Replaces {
			how = "replaced run " + sp.Previous + " (terminate_existing)"
		}
		fmt.Fprintf(w, "Start       %s\n", how)
	}
	if sp.DedupKey != "" {
		fmt.Fprintf(w, "Dedup       key %q, window %s\n", sp.DedupKey, time.Duration(sp.DedupWindow))
	}
	if d := sp.Debounce; d != nil {
		fmt.Fprintf(w, "Debounce    key %q, quiet period %s, %d start(s) collapsed\n", d.Key, time.Duration(d.Period), s.Debounced)
	}
}

// printLatest prints the run that now answers for an ended run's ID, when another does.
func printLatest(ctx context.Context, w io.Writer, client *flow.Client, s *flow.Snapshot) {
	if !s.Status.Terminal() {
		return
	}
	latest, err := client.LatestRun(ctx, s.RunID)
	if err == nil && latest != s.RunID {
		fmt.Fprintf(w, "Latest run  %s (inputs to %s reach it; `flow status %s`)\n", latest, s.RunID, latest)
	}
}
