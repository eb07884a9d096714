package flow

import (
	"context"
	"encoding/json"
	"time"

	"github.com/flowrun/flow/internal/api"
)

// Batch jobs apply one operation to every run a list filter selects, durably, at a rate, with
// a report (docs/batch.md). The types below are the batch API's JSON, as the ingress sends and
// takes it.

// BatchOp is a batch job's operation.
type BatchOp string

// The operations of batch jobs.
const (
	BatchCancel    BatchOp = "cancel"
	BatchTerminate BatchOp = "terminate"
	BatchSignal    BatchOp = "signal"
	BatchResetOp   BatchOp = "reset"
	BatchPause     BatchOp = "pause"
	BatchUnpause   BatchOp = "unpause"
)

// BatchState is where a batch job is in its life.
type BatchState string

// The states of batch jobs.
const (
	BatchPending   BatchState = "pending"
	BatchRunning   BatchState = "running"
	BatchCompleted BatchState = "completed"
	BatchStopped   BatchState = "stopped"
	BatchFailed    BatchState = "failed"
)

// Ended reports whether st is final: completed, stopped or failed.
func (st BatchState) Ended() bool {
	return st == BatchCompleted || st == BatchStopped || st == BatchFailed
}

// defaultBatchRate is a job's rate, in operations per second, when its spec names none.
const defaultBatchRate = 50

// BatchSpec says what a batch job does, fixed at its creation.
type BatchSpec struct {
	// Op is the operation applied to each run: cancel, terminate, signal, pause, unpause or
	// reset.
	Op BatchOp `json:"op"`
	// Where is the list filter (docs/search.md) selecting the runs, as `flow runs --where`.
	// Required: a job over every run says so.
	Where string `json:"where"`
	// Definition narrows the runs to one definition, and the filter's attributes to its
	// declarations, as `flow runs --definition`. "" for every definition.
	Definition string `json:"definition,omitempty"`
	// Reason is recorded with each cancellation, termination, pause or reset.
	Reason string `json:"reason,omitempty"`
	// Signal and Payload are the signal's name and JSON payload (BatchSignal).
	Signal  string          `json:"signal,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// Reset says where to reset each run to (BatchResetOp).
	Reset *BatchReset `json:"reset,omitempty"`
	// Rate is the operations per second. Defaults to 50.
	Rate float64 `json:"rate,omitempty"`
}

// EffectiveRate returns the spec's rate: Rate, or 50 when it is 0.
func (s BatchSpec) EffectiveRate() float64 {
	if s.Rate == 0 {
		return defaultBatchRate
	}
	return s.Rate
}

// BatchReset says how each run of a reset job is reset (docs/reset.md).
type BatchReset struct {
	// Mode is seq, step, last_decision or rerun.
	Mode string `json:"mode"`
	// Seq (mode seq) and StepID (modes step and rerun) say where.
	Seq    uint64 `json:"seq,omitempty"`
	StepID string `json:"step_id,omitempty"`
	// Input replaces the input of the new run (mode rerun); nil keeps it.
	Input json.RawMessage `json:"input,omitempty"`
	// DropInputs drops the signals, hooks and updates recorded after the point.
	DropInputs bool `json:"drop_inputs,omitempty"`
}

// BatchJob is a batch job as it stands: its spec, state, progress and report.
type BatchJob struct {
	// ID names the job; Spec is what it does, State where it stands.
	ID    string     `json:"id"`
	Spec  BatchSpec  `json:"spec"`
	State BatchState `json:"state"`
	// CreatedAt is when the job was created: runs started after are never targets.
	CreatedAt time.Time `json:"created_at"`
	// StartedAt is when its targets were recorded; EndedAt when it reached a final state.
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// UpdatedAt is when the job last changed.
	UpdatedAt time.Time `json:"updated_at"`
	// Total is the number of targets, in Chunks chunks; Cursor the number done, in order.
	Total  int `json:"total"`
	Chunks int `json:"chunks"`
	Cursor int `json:"cursor"`
	// Applied counts the targets the operation was applied to; Skipped those it did not apply
	// to, by reason ("already completed", "cancellation already requested", ...); Failed those
	// whose operation failed.
	Applied int            `json:"applied"`
	Skipped map[string]int `json:"skipped,omitempty"`
	Failed  int            `json:"failed"`
	// Failures and Skips name the first failed and skipped runs (at most 100 each); the
	// counts cover every run.
	Failures []BatchNote `json:"failures,omitempty"`
	Skips    []BatchNote `json:"skips,omitempty"`
	// StopRequested is set by [BatchClient.Stop], with StopReason; the job stops at the end
	// of its current window.
	StopRequested bool   `json:"stop_requested,omitempty"`
	StopReason    string `json:"stop_reason,omitempty"`
	// Error says why a failed job failed.
	Error string `json:"error,omitempty"`
	// Executor is the scheduler replica that last advanced the job.
	Executor string `json:"executor,omitempty"`
}

// BatchNote is one run's result, named in a job's report.
type BatchNote struct {
	// RunID is the run; Reason why it was skipped, or the error it failed with.
	RunID  string `json:"run_id"`
	Reason string `json:"reason"`
}

// SkippedTotal counts the targets the job skipped, whatever the reason.
func (j *BatchJob) SkippedTotal() int {
	n := 0
	for _, c := range j.Skipped {
		n += c
	}
	return n
}

// Rate is the job's observed rate: targets done per second since its targets were recorded,
// until now or its end.
func (j *BatchJob) Rate(now time.Time) float64 {
	if j.StartedAt.IsZero() || j.Cursor == 0 {
		return 0
	}
	end := now
	if !j.EndedAt.IsZero() {
		end = j.EndedAt
	}
	d := end.Sub(j.StartedAt).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(j.Cursor) / d
}

// The batch API's requests and replies that hold the types above: api.BatchCreateRequest,
// api.BatchResponse, api.BatchListRequest and api.BatchListResponse, with the SDK's types
// (TestBatchWire checks that both encode alike).
type (
	batchCreateRequest struct {
		ID     string    `json:"id,omitempty"`
		Spec   BatchSpec `json:"spec"`
		DryRun bool      `json:"dry_run,omitempty"`
		Sample int       `json:"sample,omitempty"`
	}
	batchResponse struct {
		Job     *BatchJob `json:"job,omitempty"`
		Matches int       `json:"matches,omitempty"`
		Sample  []string  `json:"sample,omitempty"`
	}
	batchListRequest struct {
		State []BatchState `json:"state,omitempty"`
		Limit int          `json:"limit,omitempty"`
	}
	batchListResponse struct {
		Jobs []BatchJob `json:"jobs"`
	}
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
	req := batchCreateRequest{Spec: spec}
	if opts != nil {
		req.ID = opts.ID
	}
	var resp batchResponse
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

// DryRun checks spec (its filter included) and counts the runs it would target now, naming
// sample of them (0 names 20). Nothing is created.
func (b BatchClient) DryRun(ctx context.Context, spec BatchSpec, sample int) (*BatchDryRun, error) {
	req := batchCreateRequest{Spec: spec, DryRun: true, Sample: sample}
	var resp batchResponse
	if err := b.do(ctx, api.SubjectBatchCreate, req, &resp); err != nil {
		return nil, err
	}
	return &BatchDryRun{Matches: resp.Matches, Sample: resp.Sample}, nil
}

// Get returns batch job id as it stands. An unknown job is an error wrapping ErrBatchNotFound.
func (b BatchClient) Get(ctx context.Context, id string) (*BatchJob, error) {
	var resp batchResponse
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
	var req batchListRequest
	if opts != nil {
		req = batchListRequest{State: opts.States, Limit: opts.Limit}
	}
	var resp batchListResponse
	if err := b.do(ctx, api.SubjectBatchList, req, &resp); err != nil {
		return nil, err
	}
	return resp.Jobs, nil
}

// Stop stops batch job id: a pending job at once, a running one once its current window of
// runs is done; the runs after it are left alone. Stopping an ended job changes nothing.
func (b BatchClient) Stop(ctx context.Context, id, reason string) (*BatchJob, error) {
	var resp batchResponse
	if err := b.do(ctx, api.SubjectBatchStop, api.BatchStopRequest{ID: id, Reason: reason}, &resp); err != nil {
		return nil, err
	}
	return resp.Job, nil
}

// Await reads batch job id until it ends, or ctx ends, and returns it. It reads the job every
// 20ms at first, backing off to every 200ms.
func (b BatchClient) Await(ctx context.Context, id string) (*BatchJob, error) {
	for every := 20 * time.Millisecond; ; every = min(2*every, 200*time.Millisecond) {
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
