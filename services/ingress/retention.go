package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/streams"
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
	kv, err := s.js.KeyValue(ctx, streams.RunsBucket)
	if err != nil {
		return ""
	}
	e, err := kv.Get(ctx, runID)
	if err != nil {
		return ""
	}
	var sum core.Summary
	if json.Unmarshal(e.Value(), &sum) != nil || sum.Deleted == nil {
		return ""
	}
	return fmt.Sprintf("run %q was deleted at %s (%s); it takes no more inputs (`flow runs --include-deleted` lists it)",
		runID, sum.Deleted.At.UTC().Format(time.RFC3339), sum.Deleted.Reason)
}
