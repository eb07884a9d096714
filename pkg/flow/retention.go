package flow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// WithRetention keeps the history of each ended run of the definition for d after the run's
// end, then the retention sweeper (in the history service) archives it, if an archive is
// configured, and deletes it (docs/retention.md). Without it, runs are kept for the sweeper's
// default (FLOW_RETENTION, 30 days). Workers publish it with the definition, and the sweeper reads
// the latest registration, so a change applies to runs that ended before it too. A run still
// running is never deleted, whatever its age; each run of a continue-as-new chain is kept for d
// after its own end.
func WithRetention(d time.Duration) WorkflowOption {
	if d <= 0 {
		panic(fmt.Sprintf("flow: WithRetention(%s): the period must be positive", d))
	}
	return func(w *workflowEntry) { w.retention = d }
}

// retention returns how long the ended runs of definition are kept (WithRetention); 0 when the
// registration does not say, or definition is not registered.
func (r *Registry) retention(definition string) time.Duration {
	w, err := r.workflow(definition)
	if err != nil {
		return 0
	}
	return w.retention
}

// RunDeletion is the tombstone of a run deleted after its retention period: when, why, and
// where its history was archived ("" when it was not). [RunSummary].Deleted holds it in
// listings that include deleted runs.
type RunDeletion = core.Deletion

// Deletion returns run runID's tombstone, or nil when its history is kept. For a deleted run
// that was not archived, it returns the tombstone and an error wrapping ErrRunDeleted.
func (c *Client) Deletion(ctx context.Context, runID string) (*RunDeletion, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	var resp api.HistoryResponse
	err := c.query(ctx, api.SubjectHistory, api.HistoryRequest{RunID: runID, Limit: 1}, &resp)
	if errors.Is(err, ErrRunDeleted) {
		page, lerr := c.Runs(ctx, &RunsFilter{IncludeDeleted: true, Where: fmt.Sprintf("run_id = %q", runID)})
		if lerr == nil {
			for _, r := range page.Runs {
				if r.RunID == runID && r.Deleted != nil {
					return r.Deleted, err
				}
			}
		}
	}
	return resp.Deleted, err
}
