package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// queryConcurrency caps the queries a worker answers at once; more wait for a slot, which holds
// back their endpoint's subscription.
const queryConcurrency = 64

// queryTimeout bounds answering one query: reading the run and running its handler.
const queryTimeout = 10 * time.Second

// serveQueries starts the worker's query endpoints (see package internal/api): for each
// definition it registers, the queries of its runs that any build may decide and, for a worker
// with a build ID, of its runs pinned to that build. Workers of one queue and build share the
// endpoints' queue group, so one of them answers each query.
func (w *Worker) serveQueries() error {
	svc, err := micro.AddService(w.nc, micro.Config{Name: "flow-worker", Version: "1.0.0",
		Description: "A Flow worker: answers queries of the runs whose code it runs"})
	if err != nil {
		return fmt.Errorf("starting the query endpoints: %w", err)
	}
	w.querySvc = svc
	w.querySlots = make(chan struct{}, queryConcurrency)
	builds := []string{""}
	if id := w.reg.BuildID(); id != "" {
		builds = append(builds, id)
	}
	for i, definition := range w.reg.Workflows() {
		for _, build := range builds {
			name := "query-" + strconv.Itoa(i)
			if build != "" {
				name += "-pinned"
			}
			subject := api.QuerySubject(w.cfg.Queue, build, definition, "*")
			err := svc.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) { w.query(r, definition, build) }),
				micro.WithEndpointSubject(subject),
				micro.WithEndpointMetadata(map[string]string{"definition": definition, "queue": w.cfg.Queue, "build_id": build}))
			if err != nil {
				_ = svc.Stop()
				return fmt.Errorf("adding the query endpoint %s: %w", subject, err)
			}
		}
	}
	// The endpoints' subscriptions are in place once the server answered a round trip.
	if err := w.nc.FlushTimeout(10 * time.Second); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("subscribing the query endpoints: %w", err)
	}
	return nil
}

// query answers one query in its own goroutine, holding a query slot. The goroutine replies by
// publishing to the request's reply subject itself: a micro.Request must not be answered after
// its handler returned (the service reads its error for its statistics then).
func (w *Worker) query(r micro.Request, definition, build string) {
	subject, data, reply := r.Subject(), r.Data(), r.Reply()
	if reply == "" {
		return // nobody waits for an answer
	}
	w.querySlots <- struct{}{}
	go func() {
		defer func() { <-w.querySlots }()
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		msg := nats.NewMsg(reply)
		resp, qerr := w.answer(ctx, subject, data, definition, build)
		var err error
		if qerr != nil {
			msg.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(qerr.HTTPStatus()))
			msg.Header.Set(micro.ErrorHeader, qerr.Message)
			msg.Data, err = json.Marshal(qerr)
		} else {
			msg.Data, err = json.Marshal(resp)
		}
		if err == nil {
			err = w.nc.PublishMsg(msg)
		}
		if err != nil {
			w.logger.Warn("a query's answer was not sent", slog.String("subject", subject), slog.String("error", err.Error()))
		}
	}()
}

// answer reads the run a query names and runs the query's handler on its snapshot.
func (w *Worker) answer(ctx context.Context, subject string, data []byte, definition, build string) (*api.QueryResponse, *api.QueryError) {
	if w.stopping.Load() {
		return nil, &api.QueryError{Code: api.QueryUnavailable, Message: "the worker is stopping; ask again"}
	}
	runID := subject[strings.LastIndexByte(subject, '.')+1:]
	var req api.QueryRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, &api.QueryError{Code: api.QueryInvalidArgs, Message: fmt.Sprintf("the request is not a JSON query request: %v", err)}
	}
	if err := event.ValidateName("query", req.Name); err != nil {
		return nil, &api.QueryError{Code: api.QueryInvalidArgs, Message: err.Error()}
	}
	if len(req.Args) > 0 && !json.Valid(req.Args) {
		return nil, &api.QueryError{Code: api.QueryInvalidArgs, Message: fmt.Sprintf("the arguments of query %q are not valid JSON", req.Name)}
	}
	s, err := w.engine.ReadSnapshot(ctx, runID)
	switch {
	case errors.Is(err, core.ErrNotFound):
		return nil, &api.QueryError{Code: api.QueryRunNotFound, Message: fmt.Sprintf("run %q does not exist", runID)}
	case errors.Is(err, store.ErrDamaged):
		return nil, &api.QueryError{Code: api.QueryRunDamaged, Message: err.Error()}
	case err != nil:
		return nil, &api.QueryError{Code: api.QueryUnavailable, Message: fmt.Sprintf("reading run %q: %v", runID, err)}
	}
	queue := s.Queue
	if queue == "" {
		queue = streams.DefaultQueue
	}
	if s.Spec.Definition != definition || s.Spec.BuildID != build || queue != w.cfg.Queue {
		return nil, &api.QueryError{Code: api.QueryMisrouted, Message: fmt.Sprintf(
			"run %q is a run of workflow %q on queue %q pinned to build %q, not one this endpoint serves (%q on %q, build %q); ask on %s",
			runID, s.Spec.Definition, queue, s.Spec.BuildID, definition, w.cfg.Queue, build,
			api.QuerySubject(queue, s.Spec.BuildID, s.Spec.Definition, runID))}
	}
	out, err := w.reg.Query(s, req.Name, req.Args)
	if err != nil {
		w.logger.DebugContext(ctx, "query refused", slog.String("run_id", runID), slog.String("query", req.Name), slog.String("error", err.Error()))
		return nil, queryError(err)
	}
	return &api.QueryResponse{Result: out, Seq: s.Seq, Status: s.Status}, nil
}

// queryError classifies the error of the registry runtime's Query (sdk.Runtime).
func queryError(err error) *api.QueryError {
	var fq *flow.QueryError
	switch {
	case errors.As(err, &fq) && fq.Unknown:
		return &api.QueryError{Code: api.QueryUnknown, Message: err.Error(), Queries: fq.Registered}
	case errors.As(err, &fq):
		return &api.QueryError{Code: api.QueryFailed, Message: fq.Message, Kind: fq.Kind}
	case errors.Is(err, flow.ErrInvalidInput):
		return &api.QueryError{Code: api.QueryInvalidArgs, Message: err.Error()}
	case errors.Is(err, flow.ErrNotFound):
		// The definition is not registered here: the endpoint would not exist.
		return &api.QueryError{Code: api.QueryMisrouted, Message: err.Error()}
	}
	return &api.QueryError{Code: api.QueryInternal, Message: err.Error()}
}
