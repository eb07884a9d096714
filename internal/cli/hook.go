package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/pkg/flow"
)

func (e *env) hookCmd() *cobra.Command {
	var payload, id string
	cmd := &cobra.Command{
		Use:   "hook TOKEN",
		Short: "Deliver a JSON payload to a hook, as its callback would",
		Long: `Deliver a JSON payload to the hook whose token is TOKEN (the last part of the callback URL a
workflow hands out, /v1/hooks/TOKEN), through the ingress. A hook takes one delivery; the same
--id with the same payload is delivered once, with another payload it is refused. The same
delivery over HTTP:

  curl -X POST -H 'Content-Type: application/json' -d '{"ok":true}' http://127.0.0.1:8421/v1/hooks/TOKEN

--json prints {"token":TOKEN,"run_id":RUN,"status":"accepted"}.`,
		Args: args("TOKEN"),
		RunE: e.withPayload(&payload, func(c *cobra.Command, client *flow.Client, a []string) error {
			run, err := client.DeliverHook(c.Context(), a[0], json.RawMessage(payload), &flow.DeliveryOptions{DeliveryID: id})
			if err != nil {
				return err
			}
			return e.answer(map[string]string{"token": a[0], "run_id": run, "status": "accepted"}, "delivered to hook %s of run %s", a[0], run)
		}),
	}
	cmd.Flags().StringVar(&payload, "payload", "null", "payload as JSON")
	cmd.Flags().StringVar(&id, "id", "", "delivery ID; a repeated ID with the same payload is delivered once (default: generated)")
	return cmd
}

// checkPayload returns a usage error when the --payload flag's value is not JSON.
func checkPayload(payload string) error {
	if !json.Valid([]byte(payload)) {
		return usageError{fmt.Errorf("--payload is not valid JSON; quote it for the shell, e.g. --payload '{\"ok\":true}'")}
	}
	return nil
}
