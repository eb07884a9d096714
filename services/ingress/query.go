package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// queryClient is the client the ingress asks workers queries with, made on first use.
type queryClient struct {
	once   sync.Once
	client *flow.Client
	err    error
}

// queryRoutes serves the queries of runs over HTTP, answered by the workers of each run's code
// (see package internal/api):
//
//	GET  /v1/runs/{run}/queries/{name}?args=<JSON>   the query with the arguments args (absent: null)
//	POST /v1/runs/{run}/queries/{name}               the query with the JSON body as its arguments
//
// An answer is a 200 with an api.QueryResult; an error the status of its api.QueryError, which
// is the body. Nothing is appended to the run.
func (s *Service) queryRoutes(mux *routes) {
	handle := func(w http.ResponseWriter, r *http.Request, args []byte) {
		if !s.authorized(w, r) {
			return
		}
		runID, name := r.PathValue("run"), r.PathValue("name")
		res, qe := s.query(r.Context(), runID, name, args)
		if qe != nil {
			writeJSON(w, qe.HTTPStatus(), qe)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
	mux.HandleFunc("GET /v1/runs/{run}/queries/{name}", func(w http.ResponseWriter, r *http.Request) {
		handle(w, r, []byte(r.URL.Query().Get("args")))
	})
	mux.HandleFunc("POST /v1/runs/{run}/queries/{name}", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, s.cfg.MaxBodyBytes))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			writeError(w, &api.IngressError{Code: api.CodeTooLarge, Message: fmt.Sprintf("the body is over the limit of %d bytes (FLOW_INGRESS_MAX_BODY_BYTES)", s.cfg.MaxBodyBytes)})
			return
		case err != nil:
			writeError(w, &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("reading the body: %v", err)})
			return
		}
		if ct := r.Header.Get("Content-Type"); len(bytes.TrimSpace(body)) > 0 && !jsonMediaType(ct) {
			writeError(w, &api.IngressError{Code: api.CodeMediaType, Message: fmt.Sprintf("Content-Type %q is not JSON; send the query's arguments with 'Content-Type: application/json'", ct)})
			return
		}
		handle(w, r, body)
	})
}

// query asks run runID's query name with args (JSON; empty means null).
func (s *Service) query(ctx context.Context, runID, name string, args []byte) (*api.QueryResult, *api.QueryError) {
	args = bytes.TrimSpace(args)
	if len(args) > 0 && !json.Valid(args) {
		return nil, &api.QueryError{Code: api.QueryInvalidArgs, Message: fmt.Sprintf("the arguments of query %q are not valid JSON; send them as ?args=<JSON> or as a JSON body", name)}
	}
	s.queries.once.Do(func() {
		s.queries.client, s.queries.err = flow.NewClient(ctx, s.nc, &flow.ClientOptions{Logger: s.logger})
	})
	if s.queries.err != nil {
		return nil, &api.QueryError{Code: api.QueryInternal, Message: s.queries.err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, inputTimeout)
	defer cancel()
	ans, err := s.queries.client.QueryRaw(ctx, runID, name, args)
	if err != nil {
		return nil, httpQueryError(err)
	}
	return &api.QueryResult{RunID: runID, Query: name, Result: ans.Result, Seq: ans.Seq, Status: ans.Status}, nil
}

// httpQueryError classifies the error of a query for its HTTP reply.
func httpQueryError(err error) *api.QueryError {
	var qe *api.QueryError
	var fq *flow.QueryError
	switch {
	case errors.As(err, &qe):
		return qe
	case errors.As(err, &fq) && fq.Unknown:
		return &api.QueryError{Code: api.QueryUnknown, Message: err.Error(), Queries: fq.Registered}
	case errors.As(err, &fq):
		return &api.QueryError{Code: api.QueryFailed, Message: err.Error(), Kind: fq.Kind}
	case errors.Is(err, flow.ErrNotFound):
		return &api.QueryError{Code: api.QueryRunNotFound, Message: err.Error()}
	case errors.Is(err, flow.ErrInvalidInput), errors.Is(err, event.ErrInvalidID):
		return &api.QueryError{Code: api.QueryInvalidArgs, Message: err.Error()}
	case errors.Is(err, flow.ErrNoWorker):
		return &api.QueryError{Code: api.QueryNoWorker, Message: err.Error()}
	case errors.Is(err, flow.ErrDamaged):
		return &api.QueryError{Code: api.QueryRunDamaged, Message: err.Error()}
	case errors.Is(err, flow.ErrHistoryUnavailable):
		return &api.QueryError{Code: api.QueryUnavailable, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &api.QueryError{Code: api.QueryTimeout, Message: "no worker answered in time: " + err.Error()}
	}
	return &api.QueryError{Code: api.QueryInternal, Message: err.Error()}
}
