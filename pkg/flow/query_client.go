package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
)

// QueryAnswer is a query's raw answer: the handler's result as JSON, and the sequence and
// status of the run's history it was computed from.
type QueryAnswer = api.QueryResponse

// Query asks run runID's workflow query name (see [RegisterQuery] and [HandleQuery]) with args,
// encoded to JSON (nil for none), and decodes the answer into result (a pointer; nil discards
// it). A worker that runs the run's code answers from the run's snapshot, the one it holds when
// the run is warm there, else one it projects from history; nothing is recorded. A run that
// ended is answered from its final history.
//
// Errors: an unknown run wraps ErrNotFound; a name the workflow does not handle is a
// *QueryError matching ErrUnknownQuery, listing those it does; args that do not decode into the
// handler's type wrap ErrInvalidInput; a handler that returned an error or panicked is a
// *QueryError matching ErrQueryFailed; no live worker for the run's queue, build and definition
// wraps ErrNoWorker.
func (c *Client) Query(ctx context.Context, runID, name string, args, result any) error {
	raw, err := encode(args)
	if err != nil {
		return fmt.Errorf("%w: the arguments of query %q do not encode to JSON: %w", ErrInvalidInput, name, err)
	}
	ans, err := c.QueryRaw(ctx, runID, name, raw)
	if err != nil {
		return err
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(ans.Result, result); err != nil {
		return fmt.Errorf("decoding the answer of query %q of run %q into %T: %w", name, runID, result, err)
	}
	return nil
}

// QueryRaw is [Client.Query] with the arguments and the answer as JSON: args empty means null.
func (c *Client) QueryRaw(ctx context.Context, runID, name string, args json.RawMessage) (*QueryAnswer, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	if err := event.ValidateName("query", name); err != nil {
		return nil, err
	}
	if len(args) > 0 && !json.Valid(args) {
		return nil, fmt.Errorf("%w: the arguments of query %q are not valid JSON", ErrInvalidInput, name)
	}
	body, err := json.Marshal(api.QueryRequest{Name: name, Args: args})
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeout)
		defer cancel()
	}
	for attempt := 0; ; attempt++ {
		rt, err := c.route(ctx, runID)
		if err != nil {
			return nil, err
		}
		ans, err := c.t.ask(ctx, runID, name, rt, body)
		var qe *api.QueryError
		if errors.As(err, &qe) && qe.Code == api.QueryMisrouted && attempt == 0 {
			// The run ID now names another run (its ID was reused): find its code again.
			c.routes.forget(runID)
			continue
		}
		return ans, err
	}
}

// ask sends a query to the workers that run the code of the run rt routes to.
func (t *transport) ask(ctx context.Context, runID, name string, rt queryRoute, body []byte) (*QueryAnswer, error) {
	subject := api.QuerySubject(rt.queue, rt.build, rt.definition, runID)
	c := call{to: worker, subject: subject}
	msg, err := t.do(ctx, c, body)
	if errors.Is(err, ErrPermissionDenied) {
		return nil, err
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w: no live worker runs workflow %q on queue %q%s to answer query %q of run %q; start one",
			ErrNoWorker, rt.definition, rt.queue, buildNote(rt.build), name, runID)
	}
	if err != nil {
		return nil, fmt.Errorf("asking query %q of run %q (%s): %w", name, runID, subject, err)
	}
	var qe *api.QueryError
	if errors.As(replyError(worker, msg), &qe) {
		return nil, queryReplyError(runID, name, rt.definition, qe)
	}
	var ans QueryAnswer
	if err := json.Unmarshal(msg.Data, &ans); err != nil {
		return nil, fmt.Errorf("decoding the answer of query %q of run %q: %w", name, runID, err)
	}
	return &ans, nil
}

func buildNote(build string) string {
	if build == "" {
		return ""
	}
	return fmt.Sprintf(" with build %q", build)
}

// queryReplyError maps a worker's error reply to what callers branch on.
func queryReplyError(runID, name, definition string, qe *api.QueryError) error {
	switch qe.Code {
	case api.QueryRunNotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, qe.Message)
	case api.QueryUnknown:
		return &QueryError{RunID: runID, Definition: definition, Name: name, Unknown: true, Registered: qe.Queries}
	case api.QueryInvalidArgs:
		return fmt.Errorf("%w: %s", ErrInvalidInput, qe.Message)
	case api.QueryFailed:
		return &QueryError{RunID: runID, Definition: definition, Name: name, Kind: qe.Kind, Message: qe.Message}
	case api.QueryRunDamaged:
		return fmt.Errorf("%w: %s", ErrDamaged, qe.Message)
	}
	return qe
}

// queryRoute is what addresses a run's queries: its queue, build and definition, which never
// change for a run.
type queryRoute struct{ queue, build, definition string }

// route returns the route of run runID's queries, read once from its run.started.
func (c *Client) route(ctx context.Context, runID string) (queryRoute, error) {
	if rt, ok := c.routes.get(runID); ok {
		return rt, nil
	}
	page, _, err := c.HistoryPage(ctx, runID, 0, 1)
	if err != nil {
		return queryRoute{}, err
	}
	if len(page) == 0 {
		return queryRoute{}, fmt.Errorf("%w: run %q", ErrNotFound, runID)
	}
	started, ok := page[0].Payload.(*event.RunStarted)
	if !ok {
		return queryRoute{}, fmt.Errorf("%w: run %q does not begin with run.started", ErrInvalidHistory, runID)
	}
	rt := queryRoute{queue: started.Queue, build: started.Spec.BuildID, definition: started.Spec.Definition}
	c.routes.put(runID, rt)
	return rt, nil
}

// queryRoutes remembers the routes of runs a client queried, bounded as seenSeqs is.
type queryRoutes struct {
	mu sync.Mutex
	m  map[string]queryRoute
}

func (r *queryRoutes) get(runID string) (queryRoute, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rt, ok := r.m[runID]
	return rt, ok
}

func (r *queryRoutes) put(runID string, rt queryRoute) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]queryRoute{}
	}
	if len(r.m) >= maxSeen {
		for k := range r.m {
			delete(r.m, k)
			if len(r.m) < maxSeen*9/10 {
				break
			}
		}
	}
	r.m[runID] = rt
}

func (r *queryRoutes) forget(runID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, runID)
}
