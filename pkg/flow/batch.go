package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/batchspec"
)

// Batch jobs apply one operation to every run a list filter selects, durably, at a rate, with
// a report (docs/batch.md).
type (
	// BatchJob is a batch job as it stands: its spec, state, progress and report.
	BatchJob = batchspec.Job
	// BatchSpec says what a batch job does.
	BatchSpec = batchspec.Spec
	// BatchOp is a batch job's operation.
	BatchOp = batchspec.Op
	// BatchState is where a batch job is in its life.
	BatchState = batchspec.State
	// BatchReset says how each run of a reset job is reset.
	BatchReset = batchspec.ResetSpec
)

// The operations and states of batch jobs.
const (
	BatchCancel    = batchspec.OpCancel
	BatchTerminate = batchspec.OpTerminate
	BatchSignal    = batchspec.OpSignal
	BatchResetOp   = batchspec.OpReset
	BatchPause     = batchspec.OpPause
	BatchUnpause   = batchspec.OpUnpause

	BatchPending   = batchspec.StatePending
	BatchRunning   = batchspec.StateRunning
	BatchCompleted = batchspec.StateCompleted
	BatchStopped   = batchspec.StateStopped
	BatchFailed    = batchspec.StateFailed
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

// batchCall asks the ingress's batch API, retrying a request that got no answer.
func (c *Client) batchCall(ctx context.Context, subject string, req, resp any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	started := time.Now()
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		reply, err := c.request(actx, &nats.Msg{Subject: subject, Data: data})
		cancel()
		if err == nil {
			return decodeBatchReply(subject, reply, resp)
		}
		if errors.Is(err, ErrPermissionDenied) {
			return err
		}
		noIngress := errors.Is(err, nats.ErrNoResponders)
		if ctx.Err() != nil || noIngress && time.Since(started) > noIngressFor ||
			!noIngress && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			if noIngress {
				return fmt.Errorf("%w on %s: start `flow dev`, or `flowd ingress` beside your NATS server", ErrIngressUnavailable, subject)
			}
			return fmt.Errorf("asking the ingress (%s): %w", subject, errors.Join(err, ctx.Err()))
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
	}
}

func decodeBatchReply(subject string, m *nats.Msg, resp any) error {
	if code := m.Header.Get(api.HeaderBatchError); code != "" {
		var e api.IngressError
		if err := json.Unmarshal(m.Data, &e); err != nil || e.Code == "" {
			e = api.IngressError{Code: api.IngressCode(code), Message: string(m.Data)}
		}
		switch e.Code {
		case api.CodeBatchNotFound:
			return fmt.Errorf("%w: %s", ErrBatchNotFound, e.Message)
		case api.CodeBatchExists:
			return fmt.Errorf("%w: %s", ErrBatchExists, e.Message)
		}
		return inputError(&e)
	}
	if err := json.Unmarshal(m.Data, resp); err != nil {
		return fmt.Errorf("decoding the ingress's reply on %s: %w", subject, err)
	}
	return nil
}
