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
	// ErrBatchExists is wrapped by [BatchClient.Start] when the job ID is taken by a job with
	// another spec.
	ErrBatchExists = errors.New("flow: a batch job with this ID exists with another spec")
)

// BatchClient starts, lists, follows and stops batch jobs, through the ingress. Get one with
// [Client.Batches]; it shares the client's connection and is safe for concurrent use.
type BatchClient struct{ t *transport }

// Batches returns the client's operations on batch jobs.
func (c *Client) Batches() BatchClient { return BatchClient{t: c.t} }

// BatchOptions adjust [BatchClient.Start]. The zero value works.
type BatchOptions struct {
	// ID is the job's ID; empty generates one. Starting a job again with the same ID and spec
	// returns that job: a retried start creates one job.
	ID string
}

// Start creates a batch job: the scheduler's batch executor records the runs spec.Where selects
// now (started before this call), then applies spec.Op to each at spec.Rate. It returns the job
// as created (pending); follow it with [BatchClient.Get] or [BatchClient.Await]. opts may be
// nil.
func (b BatchClient) Start(ctx context.Context, spec BatchSpec, opts *BatchOptions) (*BatchJob, error) {
	req := api.BatchCreateRequest{Spec: spec}
	if opts != nil {
		req.ID = opts.ID
	}
	var resp api.BatchResponse
	if err := b.do(ctx, api.SubjectBatchCreate, req, &resp); err != nil {
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

// DryRunOptions adjust [BatchClient.DryRun]. The zero value works.
type DryRunOptions struct {
	// Sample is how many of the targeted runs to name. Defaults to 20.
	Sample int
}

// DryRun checks spec (its filter included) and counts the runs it would target now, naming
// some of them. Nothing is created. opts may be nil.
func (b BatchClient) DryRun(ctx context.Context, spec BatchSpec, opts *DryRunOptions) (*BatchDryRun, error) {
	req := api.BatchCreateRequest{Spec: spec, DryRun: true}
	if opts != nil {
		req.Sample = opts.Sample
	}
	var resp api.BatchResponse
	if err := b.do(ctx, api.SubjectBatchCreate, req, &resp); err != nil {
		return nil, err
	}
	return &BatchDryRun{Matches: resp.Matches, Sample: resp.Sample}, nil
}

// Get returns batch job id as it stands. An unknown job is an error wrapping ErrBatchNotFound.
func (b BatchClient) Get(ctx context.Context, id string) (*BatchJob, error) {
	var resp api.BatchResponse
	if err := b.do(ctx, api.SubjectBatchGet, api.BatchGetRequest{ID: id}, &resp); err != nil {
		return nil, err
	}
	return resp.Job, nil
}

// BatchListOptions adjust [BatchClient.List]. The zero value works.
type BatchListOptions struct {
	// States lists the jobs in these states only. Defaults to every state.
	States []BatchState
	// Limit is how many jobs to list at most. Defaults to 50.
	Limit int
}

// List lists the batch jobs, the most recently created first. opts may be nil.
func (b BatchClient) List(ctx context.Context, opts *BatchListOptions) ([]BatchJob, error) {
	var req api.BatchListRequest
	if opts != nil {
		req = api.BatchListRequest{State: opts.States, Limit: opts.Limit}
	}
	var resp api.BatchListResponse
	if err := b.do(ctx, api.SubjectBatchList, req, &resp); err != nil {
		return nil, err
	}
	return resp.Jobs, nil
}

// Stop stops batch job id: a pending job at once, a running one once its current window of
// runs is done; the runs after it are left alone. Stopping an ended job changes nothing.
func (b BatchClient) Stop(ctx context.Context, id, reason string) (*BatchJob, error) {
	var resp api.BatchResponse
	if err := b.do(ctx, api.SubjectBatchStop, api.BatchStopRequest{ID: id, Reason: reason}, &resp); err != nil {
		return nil, err
	}
	return resp.Job, nil
}

// AwaitBatchOptions adjust [BatchClient.Await]. The zero value works.
type AwaitBatchOptions struct {
	// Every is how often to read the job. Defaults to 200ms.
	Every time.Duration
}

// Await reads batch job id until it ends, or ctx ends, and returns it. opts may be nil.
func (b BatchClient) Await(ctx context.Context, id string, opts *AwaitBatchOptions) (*BatchJob, error) {
	every := 200 * time.Millisecond
	if opts != nil && opts.Every > 0 {
		every = opts.Every
	}
	for {
		j, err := b.Get(ctx, id)
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

// do asks the ingress's batch API; each request is idempotent, so it is retried.
func (b BatchClient) do(ctx context.Context, subject string, req, resp any) error {
	return b.t.json(ctx, call{to: ingress, subject: subject, retry: true}, req, resp)
}
