package ingress

import (
	"context"
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/runsindex"
)

// deleted returns why run runID takes no input when its runs index entry is the tombstone of a
// run deleted after its retention period (docs/retention.md), or "" when it is not. It is asked
// only once the engine found no history for the run.
func (s *Service) deleted(runID string) string {
	if runID == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	runs, err := runsindex.Open(ctx, s.js)
	if err != nil {
		return ""
	}
	e, found, err := runs.Get(ctx, runID)
	if err != nil || !found || e.Err != nil || e.Value.Deleted == nil {
		return ""
	}
	sum := e.Value
	return fmt.Sprintf("run %q was deleted at %s (%s); it takes no more inputs (`flow runs --include-deleted` lists it)",
		runID, sum.Deleted.At.UTC().Format(time.RFC3339), sum.Deleted.Reason)
}
