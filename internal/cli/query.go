package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/internal/api"
)

// queryCmd is `flow query RUN NAME [--args JSON]`.
func (e *env) queryCmd() *cobra.Command {
	var queryArgs string
	cmd := &cobra.Command{
		Use:   "query RUN NAME",
		Short: "Ask a run's workflow a read-only query and print the answer",
		Long: `Ask a run's workflow query NAME (registered with flow.RegisterQuery or flow.HandleQuery) with
--args as its JSON arguments, and print the answer as JSON. A worker that runs the run's code
answers from the run's snapshot; nothing is recorded in the run's history. A run that ended is
answered from its final history. --json prints
{"run_id":RUN,"query":NAME,"result":ANSWER,"seq":SEQ,"status":STATUS}: the answer with the
sequence and status of the history it was computed from.`,
		Args: args("RUN", "NAME"),
		RunE: func(c *cobra.Command, a []string) error {
			if !json.Valid([]byte(queryArgs)) {
				return usageError{fmt.Errorf("--args is not valid JSON; quote it for the shell, e.g. --args '{\"sku\":\"sku-8842\"}'")}
			}
			client, err := e.client(c.Context())
			if err != nil {
				return err
			}
			defer client.Close()
			ans, err := client.QueryRaw(c.Context(), a[0], a[1], json.RawMessage(queryArgs))
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, api.QueryResult{RunID: a[0], Query: a[1], Result: ans.Result, Seq: ans.Seq, Status: ans.Status})
			}
			return writeJSON(e.stdout, ans.Result)
		},
	}
	cmd.Flags().StringVar(&queryArgs, "args", "null", "the query's arguments as JSON")
	return cmd
}
