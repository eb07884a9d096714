package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flowtest"
)

func (e *env) verifyCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "verify [RUN]",
		Short: "Check a run's history against Flow's invariants",
		Long: `Check every history invariant over a run's history, read from the server or, with --file,
from a file written by 'flow history --json': sequences without gaps, run.started first, one
terminal event last, references to recorded IDs only, no identity or delivery recorded twice,
unsettled steps cancelled before the end. Exits 1 if any is broken, listing them all.

A history read from the server is also checked as stored, by the history service: a history it
found damaged (a message that is not a commit of the run, or an input event - a signal, a hook
delivery, an update, a cancellation request - that no input writer signed) is reported as the
violation "damaged", with the service's diagnosis, and exits 1.`,
		Args: func(c *cobra.Command, a []string) error {
			if (file == "") != (len(a) == 1) || len(a) > 1 {
				return usageError{fmt.Errorf("give either a RUN or --file, not both (see '%s --help')", c.CommandPath())}
			}
			return nil
		},
		RunE: func(c *cobra.Command, a []string) error {
			var hist []event.Envelope
			var err error
			if file != "" {
				hist, err = flowtest.ReadHistory(file)
			} else {
				hist, err = e.history(c.Context(), a[0])
				if errors.Is(err, flow.ErrDamaged) {
					return e.reportDamaged(a[0], err)
				}
			}
			if err != nil {
				return err
			}
			if len(hist) == 0 {
				return fmt.Errorf("the history is empty")
			}
			vs := core.Check(hist[0].RunID, hist)
			if e.json {
				if vs == nil {
					vs = []core.Violation{}
				}
				if err := writeJSON(e.stdout, vs); err != nil {
					return err
				}
			} else {
				for _, v := range vs {
					fmt.Fprintln(e.stdout, v)
				}
			}
			if len(vs) > 0 {
				return fmt.Errorf("run %q: %d invariant violation(s)", hist[0].RunID, len(vs))
			}
			if !e.json {
				fmt.Fprintf(e.stdout, "run %s: %d events, all invariants hold\n", hist[0].RunID, len(hist))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "read the history from this file instead of the server")
	return cmd
}

// reportDamaged reports the history of run runID, which the history service refused as damaged
// (err), as invalid: one violation, rule "damaged".
func (e *env) reportDamaged(runID string, err error) error {
	vs := []core.Violation{{Rule: "damaged", Detail: err.Error()}}
	if e.json {
		if werr := writeJSON(e.stdout, vs); werr != nil {
			return werr
		}
	} else {
		fmt.Fprintln(e.stdout, vs[0])
	}
	return fmt.Errorf("run %q: its stored history is damaged; `flow status %s` shows how far it is valid", runID, runID)
}

func (e *env) history(ctx context.Context, runID string) ([]event.Envelope, error) {
	client, err := e.client(ctx)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	return client.History(ctx, runID, 0)
}
