package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flowrun/flow/internal/payload"
)

// payloadCmd fetches an offloaded payload (docs/large-payloads.md).
func (e *env) payloadCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "payload REF",
		Short: "Fetch an offloaded payload from the FLOW_PAYLOADS object store",
		Long: `Fetch a payload that a run's history holds by reference, and print it (or write it to --out).
A payload over the offload threshold (256 KiB by default) is stored in the FLOW_PAYLOADS object
store under its SHA-256, and history, 'flow status' and the UI show a reference in its place:

  {"$flow.payload":"sha256:9f86d0…","size":104857600}

REF is that reference (quoted JSON), "sha256:<hex>:<size>", or "<hex>:<size>". The bytes are
checked against the hash before they are printed. --json prints the reference, the size and
whether the object is there, not the bytes.`,
		Args: args("REF"),
		RunE: func(c *cobra.Command, a []string) error {
			ref, err := parsePayloadRef(a[0])
			if err != nil {
				return usageError{err}
			}
			client, err := e.client(c.Context())
			if err != nil {
				return err
			}
			defer client.Close()
			b, err := client.Payload(c.Context(), ref.JSON())
			if e.json {
				return writeJSON(e.stdout, map[string]any{"ref": json.RawMessage(ref.JSON()), "size": ref.Size, "found": err == nil})
			}
			if err != nil {
				return err
			}
			if out != "" {
				return os.WriteFile(out, b, 0o644)
			}
			_, err = e.stdout.Write(append(b, '\n'))
			return err
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "write the payload to this file instead of stdout")
	return cmd
}

// parsePayloadRef reads a reference as its JSON, sha256:<hex>:<size> or <hex>:<size>.
func parsePayloadRef(s string) (payload.Ref, error) {
	if r, ok := payload.Parse([]byte(s)); ok {
		return r, nil
	}
	hexs, size, ok := strings.Cut(strings.TrimPrefix(s, "sha256:"), ":")
	n, err := strconv.ParseInt(size, 10, 64)
	if ok && err == nil {
		if r, ok := payload.Parse(payload.Ref{SHA256: hexs, Size: n}.JSON()); ok {
			return r, nil
		}
	}
	return payload.Ref{}, fmt.Errorf("%q is not a payload reference: give its JSON, sha256:<hex>:<size> or <hex>:<size>", s)
}
