package flow

import (
	"context"
	"errors"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/batch"
)

// Batch jobs apply one operation to every run a list filter selects, durably, at a rate, with
// a report (docs/batch.md).
type (
	// BatchJob is a batch job as it stands: its spec, state, progress and report.
	BatchJob = batch.Job
	// BatchSpec says what a batch job does.
	BatchSpec = batch.Spec
	// BatchOp is a batch job's operation.
	BatchOp = batch.Op
	// BatchState is where a batch job is in its life.
	BatchState = batch.State
	// BatchReset says how each run of a reset job is reset.
	BatchReset = batch.ResetSpec
)

// The operations and states of batch jobs.
const (
	BatchCancel    = batch.OpCancel
	BatchTerminate = batch.OpTerminate
	BatchSignal    = batch.OpSignal
	BatchResetOp   = batch.OpReset
	BatchPause     = batch.OpPause
	BatchUnpause   = batch.OpUnpause

	BatchPending   = batch.StatePending
	BatchRunning   = batch.StateRunning
	BatchCompleted = batch.StateCompleted
	BatchStopped   = batch.StateStopped
	BatchFailed    = batch.StateFailed
)

// Errors of batch jobs.
var (
	// ErrBatchNotFound is wrapped when no batch job has the ID.
	ErrBatchNotFound = errors.New("flow: no such batch job")
	// ErrBatchExists is wrapped by StartBatch when the job ID is taken by a job with another
	// spec.
	ErrBatchExists = errors.New("flow: a batch job with this ID exists with another spec")
)

// BatchOptions adjust [Client.StartBatch]. The zero value works.
type BatchOptions struct {
	// ID is the job's ID; empty generates one. Starting a job again with the same ID and spec
	// returns that job: a retried start creates one job.
	ID string
}

// StartBatch creates a batch job: the scheduler's batch executor records the runs spec.Where
// selects now (started before this call), then applies spec.Op to each at spec.Rate. It
// returns the job as created (pending); follow it with [Client.Batch].
func (c *Client) StartBatch(ctx context.Context, spec BatchSpec, opts *BatchOptions) (*BatchJob, error) {
	req := api.BatchCreateRequest{Spec: spec}
	if opts != nil {
		req.ID = opts.ID
	}
	var resp api.BatchResponse
	if err := c.batchCall(ctx, api.SubjectBatchCreate, req, &resp); err != nil {
		return nil, err
	}
	return resp.Job, nil
}

// BatchDryRun is what a batch job would target now, without creating it.
type BatchDryRun struct {
	// Matches counts the runs the filter selects; Sample names up to the sample asked for.
	Matches int
	Sample  []string
}

// DryRunBatch checks spec (its filter included) and counts the runs it would target now,
// naming up to sample of them (0: 20). Nothing is created.
func (c *Client) DryRunBatch(ctx context.Context, spec BatchSpec, sample int) (*BatchDryRun, error) {
	var resp api.BatchResponse
	if err := c.batchCall(ctx, api.SubjectBatchCreate, api.BatchCreateRequest{Spec: spec, DryRun: true, Sample: sample}, &resp); err != nil {
		return nil, err
	}
	return &BatchDryRun{Matches: resp.Matches, Sample: resp.Sample}, nil
}

// Batch returns batch job id as it stands.
func (c *Client) Batch(ctx context.Context, id string) (*BatchJob, error) {
	var resp api.BatchResponse
	if err := c.batchCall(ctx, api.SubjectBatchGet, api.BatchGetRequest{ID: id}, &resp); err != nil {
		return nil, err
	}
	return resp.Job, nil
}

// Batches lists the batch jobs, the most recently created first: those in states (all when
// none), at most limit (0: 50).
func (c *Client) Batches(ctx context.Context, limit int, states ...BatchState) ([]BatchJob, error) {
	var resp api.BatchListResponse
	if err := c.batchCall(ctx, api.SubjectBatchList, api.BatchListRequest{State: states, Limit: limit}, &resp); err != nil {
		return nil, err
	}
	return resp.Jobs, nil
}

// StopBatch stops batch job id: a pending job at once, a running one once its current window
// of runs is done; the runs after it are left alone. Stopping an ended job changes nothing.
func (c *Client) StopBatch(ctx context.Context, id, reason string) (*BatchJob, error) {
	var resp api.BatchResponse
	if err := c.batchCall(ctx, api.SubjectBatchStop, api.BatchStopRequest{ID: id, Reason: reason}, &resp); err != nil {
		return nil, err
	}
	return resp.Job, nil
}

// AwaitBatch polls batch job id until it ends, or ctx ends, and returns it.
func (c *Client) AwaitBatch(ctx context.Context, id string, every time.Duration) (*BatchJob, error) {
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	for {
		j, err := c.Batch(ctx, id)
		if err != nil || j.State.Ended() {
			return j, err
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-time.After(every):
		}
	}
}

// batchCall asks the ingress's batch API; each request is idempotent, so it is retried.
func (c *Client) batchCall(ctx context.Context, subject string, req, resp any) error {
	return c.t.json(ctx, call{to: ingress, subject: subject, retry: true}, req, resp)
}
