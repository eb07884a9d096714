package flowtest

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/flowrun/flow/pkg/flow"
)

// Query answers query name of run runID with args (encoded to JSON; nil for none) as a worker
// would, from the run's snapshot, and decodes the answer into result (nil discards it). Nothing
// is recorded. Errors are those of [flow.Client.Query]: an unknown run wraps flow.ErrNotFound, an
// unhandled name is a *flow.QueryError matching flow.ErrUnknownQuery, args that do not decode
// wrap flow.ErrInvalidInput, and a failing handler is a *flow.QueryError matching
// flow.ErrQueryFailed.
func (e *Env) Query(ctx context.Context, runID, name string, args, result any) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("%w: the arguments of query %q do not encode to JSON: %w", flow.ErrInvalidInput, name, err)
	}
	s, err := e.eng().ReadSnapshot(ctx, runID)
	if err != nil {
		return err
	}
	out, err := e.registry().Query(s, name, raw)
	if err != nil {
		return err
	}
	if result == nil {
		return nil
	}
	return json.Unmarshal(out, result)
}
