package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// RegistryOptions configure a [Registry]. The zero value works.
type RegistryOptions struct {
	// BuildID identifies this build of the code. Runs started through a registry with a build ID
	// are pinned to it: only workers of the same build decide them. Defaults to "" (runs are
	// not pinned, and any build may decide them).
	BuildID string
	// Logger receives workflow and step logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// Registry holds the workflow definitions and step functions of one build of the code. Hand it
// to a worker (package pkg/flow/worker) or to the test kit (pkg/flowtest), which run its code.
//
// Register everything before handing the registry to a worker. Registration panics on a
// programming error (an empty or duplicate name), as http.HandleFunc does. After registration a
// Registry is safe for concurrent use.
type Registry struct {
	buildID   string
	logger    *slog.Logger
	replaying bool

	mu        *sync.RWMutex
	workflows map[string]*workflowEntry
	steps     map[string]stepFunc
	// queries holds the handlers RegisterQuery registered, by definition and query name.
	queries map[string]map[string]queryFunc
	// updates holds the update handlers by definition and update name (RegisterUpdate).
	updates map[string]map[string]updateFunc
	// stepLimits holds the limits of step names (LimitStep).
	stepLimits map[string]StepLimit
	// payloads is where offloaded payloads are read (UsePayloads), shared by the registry's
	// views (Replaying).
	payloads *payloadSource
}

type workflowEntry struct {
	patches []string
	run     func(ctx *Context) (Decision, error)
	check   func(input json.RawMessage) error
	// attributes are the declared search attributes, sorted by name.
	attributes []SearchAttribute
	// control is the flow control of new runs (WithFlowControl); nil for none.
	control *event.FlowControl
	// timeouts are the default run timeouts of new runs (WithRunTimeouts); nil for none.
	timeouts *event.RunTimeouts
	// retention is how long ended runs' histories are kept (WithRetention); 0 for the
	// sweeper's default.
	retention time.Duration
}

type stepFunc func(ctx context.Context, input json.RawMessage) (json.RawMessage, error)

// NewRegistry returns an empty registry. opts may be nil.
func NewRegistry(opts *RegistryOptions) *Registry {
	if opts == nil {
		opts = &RegistryOptions{}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Registry{buildID: opts.BuildID, logger: logger, mu: &sync.RWMutex{},
		workflows: map[string]*workflowEntry{}, steps: map[string]stepFunc{}, updates: map[string]map[string]updateFunc{},
		stepLimits: map[string]StepLimit{}, payloads: &payloadSource{}}
}

// BuildID returns the registry's build ID.
func (r *Registry) BuildID() string { return r.buildID }

// WorkflowOption adjusts a workflow registration.
type WorkflowOption func(*workflowEntry)

// WithPatches declares the patch markers the workflow's code knows. New runs record all of them
// in their spec, so [Context.Patched] reports true for them; runs that started before a marker
// was added report false and keep the old branch. A run that recorded a marker the code no
// longer declares is blocked with a non-determinism error.
func WithPatches(names ...string) WorkflowOption {
	return func(w *workflowEntry) { w.patches = append(w.patches, names...) }
}

// RegisterWorkflow registers fn as workflow definition name. fn is called once per decision
// point with the run's input decoded into I; it must return exactly one decision, and the same
// decision for the same history. Returning a non-nil error fails the run with that error; a panic
// blocks the run (decision.failed) until fixed code is deployed or an operator ends it.
func RegisterWorkflow[I any](r *Registry, name string, fn func(ctx *Context, in I) (Decision, error), opts ...WorkflowOption) {
	if err := event.ValidateName("workflow", name); err != nil {
		panic(fmt.Sprintf("flow: RegisterWorkflow: %v", err))
	}
	if fn == nil {
		panic(fmt.Sprintf("flow: RegisterWorkflow(%q): nil function", name))
	}
	decode := func(raw json.RawMessage) (I, error) {
		var in I
		if err := json.Unmarshal(raw, &in); err != nil {
			return in, fmt.Errorf("the input of workflow %q does not decode into %T: %w", name, in, err)
		}
		return in, nil
	}
	w := &workflowEntry{
		run: func(ctx *Context) (Decision, error) {
			in, err := decode(ctx.resolved(ctx.s.Input))
			if err != nil {
				return nil, err
			}
			return fn(ctx, in)
		},
		check: func(raw json.RawMessage) error { _, err := decode(raw); return err },
	}
	for _, o := range opts {
		o(w)
	}
	for _, p := range w.patches {
		if err := event.ValidateName("patch", p); err != nil {
			panic(fmt.Sprintf("flow: RegisterWorkflow(%q): %v", name, err))
		}
	}
	slices.Sort(w.patches)
	w.patches = slices.Compact(w.patches)
	w.attributes = checkAttributes(name, w.attributes)
	if err := checkControl(name, w.control); err != nil {
		panic(fmt.Sprintf("flow: RegisterWorkflow(%q): %v", name, err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.workflows[name]; dup {
		panic(fmt.Sprintf("flow: RegisterWorkflow: workflow %q is already registered", name))
	}
	r.workflows[name] = w
}

// RegisterStep registers fn as step function name. fn runs at least once per attempt: it may
// run again after its effect happened if the worker dies before the result is committed, so
// every external effect should carry [IdempotencyKey]. Its input is decoded into I and its
// output encoded to JSON. ctx is cancelled when the worker shuts down; [StepInfoFrom] tells the
// run, step and attempt.
func RegisterStep[I, O any](r *Registry, name string, fn func(ctx context.Context, in I) (O, error)) {
	if err := event.ValidateName("step", name); err != nil {
		panic(fmt.Sprintf("flow: RegisterStep: %v", err))
	}
	if fn == nil {
		panic(fmt.Sprintf("flow: RegisterStep(%q): nil function", name))
	}
	run := func(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
		var in I
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, &Error{Kind: KindInvalidInput, Message: fmt.Sprintf("the input of step %q does not decode into %T: %v", name, in, err), NonRetryable: true}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		b, err := encode(out) // a json.RawMessage as it is, checked, not copied
		if err != nil {
			return nil, &Error{Kind: KindInvalidOutput, Message: fmt.Sprintf("the output of step %q does not encode to JSON: %v", name, err), NonRetryable: true}
		}
		return b, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.steps[name]; dup {
		panic(fmt.Sprintf("flow: RegisterStep: step %q is already registered", name))
	}
	r.steps[name] = run
}

// workflowNames returns the registered workflow names, sorted.
func (r *Registry) workflowNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.workflows))
}

// stepNames returns the registered step names, sorted.
func (r *Registry) stepNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.steps))
}

func (r *Registry) workflow(name string) (*workflowEntry, error) {
	r.mu.RLock()
	w, ok := r.workflows[name]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: workflow definition %q is not registered (registered: %v)", ErrNotFound, name, r.workflowNames())
	}
	return w, nil
}

// spec returns the spec a new run of definition records: its name, this build ID and the
// declared patch markers. It checks that input decodes into the workflow's input type, so bad
// input is refused before anything is appended.
func (r *Registry) spec(definition string, input json.RawMessage) (event.Spec, error) {
	w, err := r.workflow(definition)
	if err != nil {
		return event.Spec{}, err
	}
	if err := w.check(input); err != nil {
		return event.Spec{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return event.Spec{Definition: definition, BuildID: r.buildID, Patches: slices.Clone(w.patches)}, nil
}

// identity implements the runtime seam: this build ID and the definition's patch markers.
func (r *Registry) identity(definition string) (core.Identity, error) {
	w, err := r.workflow(definition)
	if err != nil {
		return core.Identity{}, err
	}
	return core.Identity{BuildID: r.buildID, Patches: w.patches, Attributes: w.attributes}, nil
}

// replayingView returns a view of the registry whose workflows see [Context.IsReplaying] true and
// log nothing. Replay tools use it.
func (r *Registry) replayingView() *Registry {
	c := *r
	c.replaying = true
	c.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return &c
}

// runWorkflow implements the runtime seam (sdk.Runtime, core.Decider): it asks the
// workflow code of definition for exactly one decision, given the run's history as a snapshot.
//
// A panic is recovered into a *core.PanicError. A returned error becomes a Fail decision. If
// cancellation was requested and the code did not call [Context.CancelRequested], the decision
// is replaced by a Cancel: unsettled steps are cancelled and the run ends cancelled.
func (r *Registry) runWorkflow(definition string, input json.RawMessage, history *core.Snapshot) (dec Decision, err error) {
	w, err := r.workflow(definition)
	if err != nil {
		return nil, err
	}
	ctx := &Context{s: history, replaying: r.replaying, logger: r.logger, attributes: w.attributes, payloads: r.payloads.get()}
	defer func() {
		if p := recover(); p != nil {
			dec, err = nil, &core.PanicError{Value: p, Stack: debug.Stack()}
		}
		if history.CancelRequested && !ctx.cancelSeen {
			reason := "cancellation requested"
			if history.CancelReason != "" {
				reason += ": " + history.CancelReason
			}
			dec, err = core.Cancel{Reason: reason, Cause: event.CauseCancelRequested}, nil
		}
	}()
	d, werr := w.run(ctx)
	if werr != nil {
		return core.Fail{Error: event.ErrorInfo{Kind: KindOf(werr), Message: werr.Error()}}, nil
	}
	return d, nil
}

// runStep implements the runtime seam: it runs one attempt of a step, recovering a panic into a
// retryable error of kind "panic". The function sees [StepInfoFrom] and [IdempotencyKey] in ctx.
func (r *Registry) runStep(ctx context.Context, a core.Attempt) core.StepOutcome {
	name, input := a.Name, a.Input
	info := StepInfo{RunID: a.RunID, StepID: a.StepID, Name: a.Name, Attempt: a.Attempt}
	r.mu.RLock()
	fn, ok := r.steps[name]
	r.mu.RUnlock()
	if !ok {
		return core.StepOutcome{Err: &event.ErrorInfo{Kind: KindUnknownStep,
			Message: fmt.Sprintf("step function %q is not registered in this worker (registered: %v)", name, r.stepNames())}}
	}
	ctx = context.WithValue(ctx, stepInfoKey{}, info)
	out, err := func() (out json.RawMessage, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = &Error{Kind: KindPanic, Message: fmt.Sprintf("step %q panicked: %v", name, p)}
			}
		}()
		return fn(ctx, input)
	}()
	if err != nil {
		return core.StepOutcome{Err: &event.ErrorInfo{Kind: KindOf(err), Message: err.Error()}, NonRetryable: IsNonRetryable(err)}
	}
	return core.StepOutcome{Output: out}
}
