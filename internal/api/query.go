package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/flowrun/flow/internal/core"
)

// Queries are answered by workers, not by a service: each worker serves a nats.go micro service
// "flow-worker" whose endpoints take the queries of the runs it can run the code of, in the
// endpoints' default queue group, so one worker of the queue and build answers each query:
//
//	flow.query.<queue>.<definition>.<run>                     runs any build may decide
//	flow.query.<queue>.b.<build token>.<definition>.<run>     runs pinned to a build
//
// (the build token is core.BuildToken of the build ID, as in task subjects). The request is a
// QueryRequest; the reply a QueryResponse, or an error: the micro headers
// Nats-Service-Error-Code (the HTTP status of the QueryCode) and Nats-Service-Error, with a
// QueryError as the body.
const QueryPrefix = "flow.query."

// QuerySubject returns the subject of the queries of run runID, a run of definition on queue
// pinned to build (none: "").
func QuerySubject(queue, build, definition, runID string) string {
	if queue == "" {
		queue = core.DefaultQueue
	}
	if build == "" {
		return QueryPrefix + queue + "." + definition + "." + runID
	}
	return QueryPrefix + queue + ".b." + core.BuildToken(build) + "." + definition + "." + runID
}

// QueryRequest asks a run's workflow a query.
type QueryRequest struct {
	// Name is the query's name.
	Name string `json:"name"`
	// Args are the query's arguments, as JSON; absent means null.
	Args json.RawMessage `json:"args,omitempty"`
}

// QueryResponse is a query's answer.
type QueryResponse struct {
	// Result is what the handler returned, as JSON.
	Result json.RawMessage `json:"result"`
	// Seq is the sequence of the run's history the answer was computed from.
	Seq uint64 `json:"seq"`
	// Status is the run's status at Seq.
	Status core.Status `json:"status"`
}

// QueryCode classifies a query's error.
type QueryCode string

// Query error codes, each with its HTTP status (QueryError.HTTPStatus).
const (
	QueryRunNotFound QueryCode = "run_not_found" // 404: no such run
	QueryUnknown     QueryCode = "unknown_query" // 404: the workflow handles no query of that name; Queries lists those it does
	QueryInvalidArgs QueryCode = "invalid_args"  // 400: the request or its arguments are malformed
	QueryFailed      QueryCode = "query_failed"  // 422: the handler returned an error or panicked; Kind says which
	QueryMisrouted   QueryCode = "misrouted"     // 421: the run is not one the endpoint serves (its queue, build or definition differ)
	QueryRunDamaged  QueryCode = "run_damaged"   // 423: the run's history was found damaged
	QueryUnavailable QueryCode = "unavailable"   // 503: the worker is stopping or overloaded, or the history could not be read
	QueryInternal    QueryCode = "internal"      // 500
	QueryNoWorker    QueryCode = "no_worker"     // 503: no live worker runs the run's code (set by callers: nobody answered)
	QueryTimeout     QueryCode = "query_timeout" // 504: the worker did not answer in time (set by callers)
)

// QueryError is a query's error reply.
type QueryError struct {
	Code    QueryCode `json:"code"`
	Message string    `json:"message"`
	// Queries lists the query names the workflow handles, for QueryUnknown.
	Queries []string `json:"queries,omitempty"`
	// Kind is the handler's error kind, for QueryFailed ("panic" for a panic).
	Kind string `json:"kind,omitempty"`
}

func (e *QueryError) Error() string { return fmt.Sprintf("flow: query: %s (%s)", e.Message, e.Code) }

// HTTPStatus is the HTTP status of the error's code.
func (e *QueryError) HTTPStatus() int {
	switch e.Code {
	case QueryRunNotFound, QueryUnknown:
		return http.StatusNotFound
	case QueryInvalidArgs:
		return http.StatusBadRequest
	case QueryFailed:
		return http.StatusUnprocessableEntity
	case QueryMisrouted:
		return http.StatusMisdirectedRequest
	case QueryRunDamaged:
		return http.StatusLocked
	case QueryUnavailable, QueryNoWorker:
		return http.StatusServiceUnavailable
	case QueryTimeout:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// QueryResult is the ingress's answer to GET or POST /v1/runs/{run}/queries/{name}, and what
// `flow query --json` prints: the answer with the run and query it answers.
type QueryResult struct {
	RunID  string          `json:"run_id"`
	Query  string          `json:"query"`
	Result json.RawMessage `json:"result"`
	// Seq and Status are the sequence and status of the run's history the answer was computed
	// from.
	Seq    uint64      `json:"seq"`
	Status core.Status `json:"status"`
}
