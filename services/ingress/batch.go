package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/batch"
	"github.com/flowrun/flow/internal/filter"
)

// batchDoor is the ingress's side of batch jobs (docs/batch.md): it reads and lists them in
// FLOW_BATCHES, and checks their creations and stops and forwards them to the bucket's one
// writer, the scheduler's batch executor (owner.go), which runs them.
type batchDoor struct {
	once  sync.Once
	store *batch.Store
	err   error
	sub   *nats.Subscription
}

// Bounds of the batch API.
const (
	defaultBatchSample = 20
	maxBatchSample     = 1000
	defaultBatchList   = 50
	maxBatchList       = 1000
)

func (s *Service) batches(ctx context.Context) (*batch.Store, *api.IngressError) {
	s.batch.once.Do(func() { s.batch.store, s.batch.err = batch.Open(ctx, s.js) })
	if s.batch.err != nil {
		return nil, &api.IngressError{Code: api.CodeIngressInternal, Message: s.batch.err.Error()}
	}
	return s.batch.store, nil
}

// subscribeBatches answers the batch API on NATS (api.BatchPrefix, queue group flow-ingress).
func (s *Service) subscribeBatches() error {
	var err error
	if s.batch.sub, err = s.nc.QueueSubscribe(api.BatchPrefix+">", api.IngressQueueGroup, s.onBatchMsg); err != nil {
		return fmt.Errorf("subscribing to %s>: %w", api.BatchPrefix, err)
	}
	return nil
}

func (s *Service) onBatchMsg(m *nats.Msg) {
	s.stopMu.RLock()
	if s.stopped {
		s.stopMu.RUnlock()
		return
	}
	s.inflight.Add(1)
	s.stopMu.RUnlock()
	go func() {
		defer s.inflight.Done()
		ctx, cancel := context.WithTimeout(context.Background(), inputTimeout)
		defer cancel()
		resp, e := s.batchRequest(ctx, strings.TrimPrefix(m.Subject, api.BatchPrefix), m.Data)
		if m.Reply == "" {
			return
		}
		reply := &nats.Msg{Subject: m.Reply, Header: nats.Header{}}
		var err error
		if e != nil {
			reply.Header.Set(api.HeaderBatchError, string(e.Code))
			reply.Data, err = json.Marshal(e)
		} else {
			reply.Data, err = json.Marshal(resp)
		}
		if err == nil {
			err = s.nc.PublishMsg(reply)
		}
		if err != nil {
			s.logger.Warn("answering a batch request failed", slog.String("subject", m.Subject), slog.String("error", err.Error()))
		}
	}()
}

// batchRequest decodes and answers one request of the NATS door: op is the subject's last
// token (create, get, list, stop).
func (s *Service) batchRequest(ctx context.Context, op string, data []byte) (any, *api.IngressError) {
	if e := checkUTF8(data, "the request"); e != nil {
		return nil, e
	}
	decode := func(v any) *api.IngressError {
		if len(data) == 0 {
			return nil
		}
		if err := json.Unmarshal(data, v); err != nil {
			return &api.IngressError{Code: api.CodeInvalidJSON, Message: fmt.Sprintf("the request is not valid JSON: %v", err)}
		}
		return nil
	}
	switch op {
	case "create":
		var req api.BatchCreateRequest
		if e := decode(&req); e != nil {
			return nil, e
		}
		return s.createBatch(ctx, req)
	case "get":
		var req api.BatchGetRequest
		if e := decode(&req); e != nil {
			return nil, e
		}
		return s.getBatch(ctx, req.ID)
	case "list":
		var req api.BatchListRequest
		if e := decode(&req); e != nil {
			return nil, e
		}
		return s.listBatches(ctx, req)
	case "stop":
		var req api.BatchStopRequest
		if e := decode(&req); e != nil {
			return nil, e
		}
		return s.stopBatch(ctx, req)
	}
	return nil, &api.IngressError{Code: api.CodeRouteNotFound, Message: fmt.Sprintf("no batch request %q; use %s, %s, %s or %s",
		op, api.SubjectBatchCreate, api.SubjectBatchGet, api.SubjectBatchList, api.SubjectBatchStop)}
}

// batchRoutes serves the batch API over HTTP:
//
//	POST /v1/batches              BatchCreateRequest: 201 (created), 200 (existing, or a dry run)
//	GET  /v1/batches?state=&limit= BatchListResponse
//	GET  /v1/batches/{id}         BatchResponse
//	POST /v1/batches/{id}/stop    {"reason": ...}: BatchResponse
func (s *Service) batchRoutes(mux *routes) {
	answer := func(w http.ResponseWriter, ok int, resp any, e *api.IngressError) {
		if e != nil {
			writeJSON(w, api.BatchStatus(e), e)
			return
		}
		writeJSON(w, ok, resp)
	}
	body := func(w http.ResponseWriter, r *http.Request, v any) bool {
		b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, s.cfg.MaxBodyBytes))
		if err == nil && len(b) > 0 {
			err = json.Unmarshal(b, v)
		}
		if err != nil {
			writeError(w, &api.IngressError{Code: api.CodeInvalidJSON, Message: fmt.Sprintf("the body is not a JSON request: %v", err)})
			return false
		}
		return true
	}
	mux.HandleFunc("POST /v1/batches", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(w, r) {
			return
		}
		var req api.BatchCreateRequest
		if !body(w, r, &req) {
			return
		}
		resp, e := s.createBatch(r.Context(), req)
		status := http.StatusOK
		if resp != nil && resp.Created {
			status = http.StatusCreated
		}
		answer(w, status, resp, e)
	})
	mux.HandleFunc("GET /v1/batches", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(w, r) {
			return
		}
		req := api.BatchListRequest{}
		for _, st := range r.URL.Query()["state"] {
			for _, v := range strings.Split(st, ",") {
				req.State = append(req.State, batch.State(v))
			}
		}
		if l := r.URL.Query().Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil {
				writeError(w, &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("limit %q is not a number", l)})
				return
			}
			req.Limit = n
		}
		resp, e := s.listBatches(r.Context(), req)
		answer(w, http.StatusOK, resp, e)
	})
	mux.HandleFunc("GET /v1/batches/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(w, r) {
			return
		}
		resp, e := s.getBatch(r.Context(), r.PathValue("id"))
		answer(w, http.StatusOK, resp, e)
	})
	mux.HandleFunc("POST /v1/batches/{id}/stop", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(w, r) {
			return
		}
		var req api.BatchStopRequest
		if !body(w, r, &req) {
			return
		}
		req.ID = r.PathValue("id")
		resp, e := s.stopBatch(r.Context(), req)
		answer(w, http.StatusOK, resp, e)
	})
}

// filterSchema is the filter schema of definition's runs ("" for every definition's), from the
// definitions the ingress knows.
func (s *Service) filterSchema(definition string) filter.Schema {
	var decls []filter.Declared
	if d, ok := s.defs.(*liveDefinitions); ok {
		for _, def := range d.view.List() {
			if definition == "" || def.Definition == definition {
				decls = append(decls, filter.Declared{Definition: def.Definition, Attributes: def.Attributes})
			}
		}
	}
	return filter.NewSchema(streams.DefaultQueue, decls...)
}

// createBatch checks a job's spec and filter, and has the batch executor create it (or, DryRun,
// counts its runs).
func (s *Service) createBatch(ctx context.Context, req api.BatchCreateRequest) (*api.BatchResponse, *api.IngressError) {
	invalid := func(err error) *api.IngressError {
		return &api.IngressError{Code: api.CodeInvalidRequest, Message: strings.TrimPrefix(err.Error(), "batch: invalid job: ")}
	}
	if req.ID == "" {
		req.ID = "batch-" + strings.ToLower(nuid.Next())
	}
	if err := batch.ValidateID(req.ID); err != nil {
		return nil, invalid(err)
	}
	if err := req.Spec.Validate(); err != nil {
		return nil, invalid(err)
	}
	if err := batch.Supported(batch.Adapt(s.engine), req.Spec.Op); err != nil {
		return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: err.Error()}
	}
	now := time.Now().UTC()
	j := batch.Job{ID: req.ID, Spec: req.Spec, Schema: s.filterSchema(req.Spec.Definition), State: batch.StatePending, CreatedAt: now, UpdatedAt: now}
	if _, err := batch.Compile(j.Spec, j.Schema); err != nil {
		return nil, invalid(err)
	}
	if req.DryRun {
		sample := req.Sample
		if sample == 0 {
			sample = defaultBatchSample
		}
		if sample < 0 || sample > maxBatchSample {
			return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("sample must be between 1 and %d, got %d", maxBatchSample, sample)}
		}
		ids, total, err := batch.Resolve(ctx, s.js, &j, sample)
		if err != nil {
			return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: err.Error()}
		}
		return &api.BatchResponse{DryRun: true, Matches: total, Sample: ids}, nil
	}
	var resp api.BatchResponse
	if e := s.askScheduler(ctx, api.SchedulerBatchSubject(api.BatchOpCreate), "batch executor", j, &resp); e != nil {
		return nil, e
	}
	if resp.Job != nil {
		resp.Job = public(*resp.Job)
	}
	return &resp, nil
}

func (s *Service) getBatch(ctx context.Context, id string) (*api.BatchResponse, *api.IngressError) {
	st, e := s.batches(ctx)
	if e != nil {
		return nil, e
	}
	if err := batch.ValidateID(id); err != nil {
		return nil, &api.IngressError{Code: api.CodeInvalidName, Message: err.Error()}
	}
	j, _, err := st.Get(ctx, id)
	if errors.Is(err, batch.ErrNotFound) {
		return nil, &api.IngressError{Code: api.CodeBatchNotFound, Message: fmt.Sprintf("no batch job %q; flow batch list shows them", id)}
	}
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: err.Error()}
	}
	return &api.BatchResponse{Job: public(j)}, nil
}

// public returns the job as the API shows it: without the filter's schema, which only the
// executor reads.
func public(j batch.Job) *batch.Job {
	j.Schema = filter.Schema{}
	return &j
}

func (s *Service) listBatches(ctx context.Context, req api.BatchListRequest) (*api.BatchListResponse, *api.IngressError) {
	limit := req.Limit
	if limit == 0 {
		limit = defaultBatchList
	}
	if limit < 0 || limit > maxBatchList {
		return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("limit must be between 1 and %d, got %d", maxBatchList, limit)}
	}
	st, e := s.batches(ctx)
	if e != nil {
		return nil, e
	}
	jobs, err := st.List(ctx)
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: err.Error()}
	}
	if len(req.State) > 0 {
		jobs = slices.DeleteFunc(jobs, func(j batch.Job) bool { return !slices.Contains(req.State, j.State) })
	}
	resp := &api.BatchListResponse{Jobs: jobs[:min(limit, len(jobs))], Total: len(jobs)}
	for i := range resp.Jobs {
		resp.Jobs[i] = *public(resp.Jobs[i])
	}
	return resp, nil
}

func (s *Service) stopBatch(ctx context.Context, req api.BatchStopRequest) (*api.BatchResponse, *api.IngressError) {
	if _, e := s.getBatch(ctx, req.ID); e != nil {
		return nil, e
	}
	var resp api.BatchResponse
	if e := s.askScheduler(ctx, api.SchedulerBatchSubject(api.BatchOpStop), "batch executor", req, &resp); e != nil {
		return nil, e
	}
	if resp.Job != nil {
		resp.Job = public(*resp.Job)
	}
	return &resp, nil
}
