package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/batch"
)

// serveDoor serves the creations and stops of batch jobs the ingress forwards while the
// executor leads; close stops it.
func (x *batchExecutor) serveDoor() (close func(), err error) {
	ops := map[string]doorOp{
		api.BatchOpCreate: func(ctx context.Context, data []byte) (any, *api.IngressError) {
			var j batch.Job
			if err := json.Unmarshal(data, &j); err != nil {
				return nil, &api.IngressError{Code: api.CodeInvalidJSON, Message: fmt.Sprintf("the request is not a batch job: %v", err)}
			}
			return x.createBatch(ctx, j)
		},
		api.BatchOpStop: func(ctx context.Context, data []byte) (any, *api.IngressError) {
			var req api.BatchStopRequest
			if err := json.Unmarshal(data, &req); err != nil {
				return nil, &api.IngressError{Code: api.CodeInvalidJSON, Message: fmt.Sprintf("the request is not a batch stop: %v", err)}
			}
			return x.stopBatch(ctx, req)
		},
	}
	return openDoor(x.nc, x.logger, api.SchedulerBatchesService, "Flow's batch executor: the one writer of FLOW_BATCHES (jobs created and stopped through the ingress)",
		api.SchedulerBatchesGroup, ops, &x.door)
}

// createBatch creates job j, pending as of now, from its ID, spec and filter schema (which the
// ingress checked). A job with the same ID and spec is answered as it stands (Created false);
// one with another spec is CodeBatchExists.
func (x *batchExecutor) createBatch(ctx context.Context, j batch.Job) (*api.BatchResponse, *api.IngressError) {
	if err := errors.Join(batch.ValidateID(j.ID), j.Spec.Validate()); err != nil {
		return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: strings.TrimPrefix(err.Error(), "batch: invalid job: ")}
	}
	now := time.Now().UTC()
	j = batch.Job{ID: j.ID, Spec: j.Spec, Schema: j.Schema, State: batch.StatePending, CreatedAt: now, UpdatedAt: now}
	got, created, err := x.batches.Create(ctx, j)
	if errors.Is(err, batch.ErrExists) {
		return nil, &api.IngressError{Code: api.CodeBatchExists, Message: strings.TrimPrefix(err.Error(), "batch: ") + "; choose another job ID"}
	}
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: err.Error()}
	}
	if created {
		x.logger.InfoContext(ctx, "batch job created", slog.String("job", j.ID), slog.String("op", string(j.Spec.Op)), slog.String("where", j.Spec.Where))
	}
	return &api.BatchResponse{Job: &got, Created: created}, nil
}

// stopBatch asks job req.ID to stop (batch.Store.Stop).
func (x *batchExecutor) stopBatch(ctx context.Context, req api.BatchStopRequest) (*api.BatchResponse, *api.IngressError) {
	if err := batch.ValidateID(req.ID); err != nil {
		return nil, &api.IngressError{Code: api.CodeInvalidName, Message: err.Error()}
	}
	reason := req.Reason
	if reason == "" {
		reason = "stopped by an operator"
	}
	j, err := x.batches.Stop(ctx, req.ID, reason, time.Now().UTC())
	if errors.Is(err, batch.ErrNotFound) {
		return nil, &api.IngressError{Code: api.CodeBatchNotFound, Message: fmt.Sprintf("no batch job %q; flow batch list shows them", req.ID)}
	}
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: err.Error()}
	}
	return &api.BatchResponse{Job: &j}, nil
}

// AnswersBatches reports whether this replica serves the creations and stops of batch jobs: it
// leads the batch executor, and the server has its door's subscriptions.
func (s *Scheduler) AnswersBatches() bool { return s.batches.Answering() }

// Answering reports whether the executor serves its door: it leads, and the server has the
// door's subscriptions.
func (x *batchExecutor) Answering() bool { return x.door.Load() }
