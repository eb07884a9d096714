package api

import (
	"github.com/flowrun/flow/internal/batchspec"
)

// Batch jobs (docs/batch.md) are created, read, listed and stopped through the ingress, which
// forwards creations and stops to the scheduler's batch executor (owner.go):
//
//	NATS (request/reply, JSON; queue group flow-ingress)     HTTP
//	flow.api.batches.create  BatchCreateRequest: BatchResponse   POST /v1/batches
//	flow.api.batches.get     BatchGetRequest: BatchResponse      GET  /v1/batches/{id}
//	flow.api.batches.list    BatchListRequest: BatchListResponse GET  /v1/batches
//	flow.api.batches.stop    BatchStopRequest: BatchResponse     POST /v1/batches/{id}/stop
//
// An error is an IngressError: over NATS the reply's body, with the header Flow-Error set to
// its code; over HTTP the body, with its status.
const (
	BatchPrefix        = "flow.api.batches."
	SubjectBatchCreate = BatchPrefix + "create"
	SubjectBatchGet    = BatchPrefix + "get"
	SubjectBatchList   = BatchPrefix + "list"
	SubjectBatchStop   = BatchPrefix + "stop"
)

// HeaderBatchError is set, on a NATS reply of the batch API that is an error, to its code.
const HeaderBatchError = "Flow-Error"

// BatchCreateRequest creates a batch job, or (DryRun) says which runs it would target.
type BatchCreateRequest struct {
	// ID is the job's ID: 1-128 letters, digits, '-' or '_'. Empty generates one. Creating an
	// existing ID with the same spec returns that job (a retried create); with another spec
	// is refused (409).
	ID   string         `json:"id,omitempty"`
	Spec batchspec.Spec `json:"spec"`
	// DryRun creates nothing: the answer counts the runs the filter selects now and names up
	// to Sample of them.
	DryRun bool `json:"dry_run,omitempty"`
	// Sample bounds the runs a dry run names. Defaults to 20; at most 1000.
	Sample int `json:"sample,omitempty"`
}

// BatchResponse is a job as it stands, or a dry run's answer.
type BatchResponse struct {
	Job *batchspec.Job `json:"job,omitempty"`
	// Created is set when this request created the job.
	Created bool `json:"created,omitempty"`
	// DryRun: Matches counts the runs the filter selects now, Sample names some of them.
	DryRun  bool     `json:"dry_run,omitempty"`
	Matches int      `json:"matches,omitempty"`
	Sample  []string `json:"sample,omitempty"`
}

// BatchGetRequest asks for a job.
type BatchGetRequest struct {
	ID string `json:"id"`
}

// BatchListRequest lists the jobs, the most recently created first.
type BatchListRequest struct {
	// State keeps the jobs in any of these states.
	State []batchspec.State `json:"state,omitempty"`
	// Limit bounds the answer. Defaults to 50; at most 1000.
	Limit int `json:"limit,omitempty"`
}

// BatchListResponse lists jobs.
type BatchListResponse struct {
	Jobs []batchspec.Job `json:"jobs"`
	// Total counts the jobs that match, beyond Limit.
	Total int `json:"total"`
}

// BatchStopRequest stops a job: a pending one at once, a running one once its current window
// of targets is done. The runs after its cursor are left alone.
type BatchStopRequest struct {
	ID     string `json:"id"`
	Reason string `json:"reason,omitempty"`
}

// Error codes of the batch API, beyond the ingress's.
const (
	CodeBatchNotFound IngressCode = "batch_not_found" // 404
	CodeBatchExists   IngressCode = "batch_exists"    // 409
)

// BatchStatus is the HTTP status of an error of the batch API.
func BatchStatus(e *IngressError) int {
	switch e.Code {
	case CodeBatchNotFound:
		return 404
	case CodeBatchExists:
		return 409
	}
	return e.HTTPStatus()
}
