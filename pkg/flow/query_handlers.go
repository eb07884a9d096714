package flow

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// QueryError is the error of a query that was not answered: the run's workflow does not handle
// its name (Unknown is set; it matches ErrUnknownQuery), or its handler returned an error or
// panicked (it matches ErrQueryFailed).
type QueryError struct {
	// RunID is the run queried, Definition its workflow, Name the query asked for.
	RunID, Definition, Name string
	// Unknown is set when the workflow does not handle Name; Registered then lists the names it
	// handles, sorted: those of RegisterQuery and those its code declared with HandleQuery when
	// evaluated on the run's snapshot.
	Unknown    bool
	Registered []string
	// Kind and Message are the handler's error: its kind ([KindOf]), KindPanic for a panic and
	// KindInvalidOutput for a result that does not encode to JSON.
	Kind, Message string
}

func (e *QueryError) Error() string {
	if !e.Unknown {
		return fmt.Sprintf("%v: query %q of run %q: %s", ErrQueryFailed, e.Name, e.RunID, event.ErrorInfo{Kind: e.Kind, Message: e.Message}.Error())
	}
	known := "it handles none"
	if len(e.Registered) > 0 {
		known = "it handles " + strings.Join(e.Registered, ", ")
	}
	return fmt.Sprintf("%v: workflow %q (run %q) has no query %q; %s (register one with flow.RegisterQuery or flow.HandleQuery)",
		ErrUnknownQuery, e.Definition, e.RunID, e.Name, known)
}

// Is matches ErrUnknownQuery for an unknown name, ErrQueryFailed for a handler's failure.
func (e *QueryError) Is(target error) bool {
	if e.Unknown {
		return target == ErrUnknownQuery
	}
	return target == ErrQueryFailed
}

// ErrorKind returns the failure's kind, for [KindOf].
func (e *QueryError) ErrorKind() string { return e.Kind }

// queryFunc answers one query on a context over the run's snapshot.
type queryFunc func(ctx *Context, args json.RawMessage) (json.RawMessage, error)

// queryEval collects the handlers the code declares with HandleQuery while it is evaluated to
// answer a query.
type queryEval struct {
	handlers map[string]queryFunc
}

// RegisterQuery registers fn as query name of workflow definition: a read-only question about a
// run, answered by a worker that runs the definition's code, from the run's snapshot, without
// recording anything. fn reads the run through ctx (its readers, as workflow code does: step
// outputs, signals, [Context.Now] ...); args are the caller's, decoded into A (absent args are
// JSON null); the result is encoded to JSON. fn must not modify the snapshot; decisions it
// builds are discarded. An error or a panic is returned to the caller as a *QueryError. A
// query of a run that ended is answered from its final history.
//
// A name registered here is answered without evaluating the workflow function; [HandleQuery]
// declares queries from inside it instead. Registration panics on an invalid or duplicate name,
// as RegisterWorkflow does.
func RegisterQuery[A, R any](r *Registry, definition, name string, fn func(ctx *Context, args A) (R, error)) {
	if err := event.ValidateName("definition", definition); err != nil {
		panic(fmt.Sprintf("flow: RegisterQuery: %v", err))
	}
	if err := event.ValidateName("query", name); err != nil {
		panic(fmt.Sprintf("flow: RegisterQuery(%q): %v", definition, err))
	}
	if fn == nil {
		panic(fmt.Sprintf("flow: RegisterQuery(%q, %q): nil function", definition, name))
	}
	q := func(ctx *Context, raw json.RawMessage) (json.RawMessage, error) {
		args, err := decodeQueryArgs[A](ctx, name, raw)
		if err != nil {
			return nil, err
		}
		res, err := fn(ctx, args)
		if err != nil {
			return nil, err
		}
		return encodeQueryResult(ctx, name, res)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.queries == nil {
		r.queries = map[string]map[string]queryFunc{}
	}
	if r.queries[definition] == nil {
		r.queries[definition] = map[string]queryFunc{}
	}
	if _, dup := r.queries[definition][name]; dup {
		panic(fmt.Sprintf("flow: RegisterQuery: query %q of workflow %q is already registered", name, definition))
	}
	r.queries[definition][name] = q
}

// HandleQuery declares query name from inside workflow code, so that its handler can read the
// values the code computed from history (locals, a state machine's state). It does nothing while
// the code decides (it costs one comparison); to answer a query, a worker evaluates the workflow
// function on the run's snapshot in query mode, collects the handlers it declared, discards the
// decision it returned and calls the handler for the query's name. Declare handlers before the
// code returns, on every path that should answer them; the last declaration of a name wins.
//
//	flow.HandleQuery(ctx, "progress", func(struct{}) (Progress, error) { return progress, nil })
//
// In query mode [Context.SideEffect] does not call its function and [Context.IsReplaying]
// reports true. args are decoded into A and the result encoded to JSON, as for
// [RegisterQuery], whose registrations take precedence over a name declared here.
func HandleQuery[A, R any](ctx *Context, name string, fn func(args A) (R, error)) {
	if ctx.query == nil || fn == nil {
		return
	}
	ctx.query.handlers[name] = func(ctx *Context, raw json.RawMessage) (json.RawMessage, error) {
		args, err := decodeQueryArgs[A](ctx, name, raw)
		if err != nil {
			return nil, err
		}
		res, err := fn(args)
		if err != nil {
			return nil, err
		}
		return encodeQueryResult(ctx, name, res)
	}
}

// IsQuerying reports whether the code is being evaluated to answer a query ([HandleQuery]):
// the decision it returns is discarded.
func (c *Context) IsQuerying() bool { return c.query != nil }

func decodeQueryArgs[A any](ctx *Context, name string, raw json.RawMessage) (A, error) {
	var args A
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return args, fmt.Errorf("%w: the arguments of query %q (run %q) do not decode into %T: %v", ErrInvalidInput, name, ctx.s.RunID, args, err)
	}
	return args, nil
}

func encodeQueryResult(ctx *Context, name string, res any) (json.RawMessage, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return nil, &QueryError{RunID: ctx.s.RunID, Name: name, Kind: KindInvalidOutput,
			Message: fmt.Sprintf("the result does not encode to JSON: %v", err)}
	}
	return b, nil
}

// quiet discards the logs of code evaluated to answer a query.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// queryNames returns the query names RegisterQuery registered for definition, sorted.
func (r *Registry) queryNames(definition string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.queries[definition]))
}

// query answers query name of the run whose snapshot is s with args (JSON; empty means null):
// with the handler RegisterQuery registered for the run's definition, else with the one the
// workflow function declares with HandleQuery when evaluated on s in query mode. Nothing is
// recorded; s is only read. It returns an error wrapping ErrNotFound when the definition is not
// registered, an *QueryError for a name nobody handles, an error wrapping
// ErrInvalidInput for args that do not decode, and a *QueryError when the handler (or
// the workflow function evaluated for it) returned an error or panicked. Query is safe for
// concurrent use on distinct snapshots.
func (r *Registry) query(s *core.Snapshot, name string, args json.RawMessage) (json.RawMessage, error) {
	w, err := r.workflow(s.Spec.Definition)
	if err != nil {
		return nil, err
	}
	ctx := &Context{s: s, replaying: true, logger: quiet, query: &queryEval{handlers: map[string]queryFunc{}}, attributes: w.attributes,
		payloads: r.payloads.get()}
	r.mu.RLock()
	fn, registered := r.queries[s.Spec.Definition][name]
	r.mu.RUnlock()
	if !registered {
		if err := guard(s.RunID, name, "the workflow function, evaluated to find the query's handler,", func() error {
			_, _ = w.run(ctx) // the decision, or the error, is discarded: nothing is recorded
			return nil
		}); err != nil {
			return nil, err
		}
		if fn = ctx.query.handlers[name]; fn == nil {
			names := append(r.queryNames(s.Spec.Definition), slices.Collect(maps.Keys(ctx.query.handlers))...)
			slices.Sort(names)
			return nil, &QueryError{RunID: s.RunID, Definition: s.Spec.Definition, Name: name, Unknown: true, Registered: slices.Compact(names)}
		}
	}
	var out json.RawMessage
	err = guard(s.RunID, name, "the handler", func() error {
		var err error
		out, err = fn(ctx, args)
		return err
	})
	if err != nil {
		var qf *QueryError
		if errors.Is(err, ErrInvalidInput) || errors.As(err, &qf) {
			return nil, err
		}
		return nil, &QueryError{RunID: s.RunID, Definition: s.Spec.Definition, Name: name, Kind: KindOf(err), Message: err.Error()}
	}
	return out, nil
}

// guard runs fn, recovering a panic into a *QueryError of kind KindPanic.
func guard(runID, name, who string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &QueryError{RunID: runID, Name: name, Kind: KindPanic,
				Message: fmt.Sprintf("%s panicked: %v (at %s)", who, p, (&core.PanicError{Value: p, Stack: debug.Stack()}).Location())}
		}
	}()
	return fn()
}
