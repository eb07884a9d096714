package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/internal/liveness"
	"github.com/flowrun/flow/pkg/flow"
)

func (e *env) definitionsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "definitions",
		Short: "List workflow definitions and the live workers that serve them",
		Long: `List the workflow definitions workers registered, by queue, with the build of the latest worker
to register each and the live workers that serve it now. A definition with no live worker (0 in
WORKERS) is not served: its runs wait, parked, until a worker that registers it starts. Every queue
is listed unless --queue is given.`,
		Example: `  flow definitions
  flow definitions --queue orders
  flow definitions --json`,
		Args: args(),
		RunE: e.withClient(func(c *cobra.Command, client *flow.Client, _ []string) error {
			queue := ""
			if c.Flags().Changed("queue") {
				queue = e.queue
			}
			defs, err := client.Definitions().List(c.Context(), queue)
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, defs)
			}
			if len(defs) == 0 {
				if queue != "" {
					fmt.Fprintf(e.stdout, "No definitions on queue %s. Start a worker that registers some on it.\n", queue)
				} else {
					fmt.Fprintln(e.stdout, "No definitions yet. Start a worker (flow dev runs one with the examples).")
				}
				return nil
			}
			now := time.Now()
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DEFINITION\tQUEUE\tBUILD\tWORKERS\tLAST HEARTBEAT")
			for _, d := range defs {
				build := d.BuildID
				if build == "" {
					build = "-"
				}
				workers := "0"
				var names []string
				var beat time.Time
				for _, w := range d.Workers {
					names = append(names, w.Name)
					if w.BeatAt.After(beat) {
						beat = w.BeatAt
					}
				}
				if len(names) > 0 {
					workers = fmt.Sprintf("%d (%s)", len(names), truncate(strings.Join(names, ", "), 60))
				}
				last := "never seen"
				switch {
				case !beat.IsZero():
					last = liveness.Ago(now.Sub(beat))
				case !d.LastSeen.IsZero():
					last = liveness.Ago(now.Sub(d.LastSeen)) + " (gone)"
				case !d.UpdatedAt.IsZero():
					last = "registered " + liveness.Ago(now.Sub(d.UpdatedAt)) + " (gone)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Definition, d.Queue, build, workers, last)
			}
			return tw.Flush()
		}),
	}
}
