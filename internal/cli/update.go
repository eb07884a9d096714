package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/flowrun/flow/internal/core"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/pkg/flow"
)

func (e *env) updateCmd() *cobra.Command {
	var payload, id string
	var wait bool
	cmd := &cobra.Command{
		Use:   "update RUN NAME",
		Short: "Send an update to a run and, with --wait, print its result",
		Long: `Send update NAME with a JSON payload to run RUN, through the ingress. The run's next decision
accepts it (the workflow's validator may reject it instead) and the workflow completes it with a
result, at once or after steps. With --wait the command waits for that result and prints it; a
rejection, a failure or the run ending first is an error (exit status 1). Without --wait it prints
the update ID; run it again with the same payload and --id ID --wait to wait for its result. The same --id with the same name and
payload is applied once and has one outcome; see docs/updates.md. The same update over HTTP:

  curl -X POST -H 'Content-Type: application/json' -d '5' 'http://127.0.0.1:8421/v1/runs/RUN/updates/NAME?wait=true'

--json prints {"run_id":RUN,"update_id":ID,"status":STATUS,"result":RESULT}.`,
		Args: args("RUN", "NAME"),
		RunE: e.withPayload(&payload, func(c *cobra.Command, client *flow.Client, a []string) error {
			out, err := client.Update(c.Context(), a[0], a[1], json.RawMessage(payload), &flow.UpdateOptions{UpdateID: id, Wait: wait})
			var ue *flow.UpdateError
			if errors.As(err, &ue) && e.json {
				_ = writeJSON(e.stdout, map[string]any{"run_id": ue.RunID, "update_id": ue.UpdateID, "status": ue.Status,
					"error": map[string]string{"kind": ue.Kind, "message": ue.Message}})
			}
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, map[string]any{"run_id": out.RunID, "update_id": out.UpdateID, "status": out.Status, "result": out.Result})
			}
			if !wait {
				fmt.Fprintf(e.stdout, "update %s sent to run %s; wait for its result with `flow update %s %s --id %s --wait`\n", out.UpdateID, out.RunID, out.RunID, a[1], out.UpdateID)
				return nil
			}
			fmt.Fprintf(e.stdout, "%s\n", out.Result)
			return nil
		}),
	}
	cmd.Flags().StringVar(&payload, "payload", "null", "payload as JSON")
	cmd.Flags().StringVar(&id, "id", "", "update ID; a repeated ID with the same name and payload is applied once and answers the same (default: generated)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the update's result and print it")
	return cmd
}

// printUpdates lists a run's updates for `flow status`, in the order received.
func printUpdates(w io.Writer, s *flow.Snapshot, ended bool) {
	for _, u := range s.UpdateList() {
		state := string(u.Status)
		switch {
		case u.Status == core.UpdateCompleted && u.Error != nil:
			state = fmt.Sprintf("failed at seq %d: %s", u.SettledSeq, u.Error.Error())
		case u.Status == core.UpdateCompleted:
			state = fmt.Sprintf("completed at seq %d: %s", u.SettledSeq, u.Result)
		case u.Status == core.UpdateRejected:
			state = fmt.Sprintf("rejected at seq %d: %s", u.SettledSeq, u.Error.Error())
		case ended:
			state += " (never settled: the run ended)"
		}
		fmt.Fprintf(w, "Update %s (%s): %s\n", u.ID, u.Name, state)
	}
}
