package flow

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// Decision is the one durable decision workflow code returns at a decision point. Build it with
// the constructors on [Context]; a batch of steps or children is one decision. Each decision
// names a stable ID; re-issuing it while it is pending keeps the run waiting on it, and
// re-issuing it with different fields is a non-determinism error.
type Decision = core.Decision

// Step describes one member of a [Context.ScheduleSteps] batch.
type Step struct {
	// ID is stable and unique within the run: letters, digits, '-' or '_', starting with a letter.
	ID string
	// Name is the registered step function to run.
	Name string
	// Input is encoded to JSON.
	Input any
	// Retry is the step's policy; nil means the defaults of [RetryPolicy].
	Retry *RetryPolicy
	// ScheduleToStartTimeout, StartToCloseTimeout and HeartbeatTimeout bound each attempt
	// (docs/timeouts.md); 0 for none. See [WithStartToCloseTimeout] and the others.
	ScheduleToStartTimeout, StartToCloseTimeout, HeartbeatTimeout time.Duration
}

// StepOption adjusts a step scheduled with [Context.ScheduleStep].
type StepOption func(*Step)

// WithRetry sets the step's retry policy.
func WithRetry(p RetryPolicy) StepOption { return func(s *Step) { s.Retry = &p } }

// ScheduleStep schedules step id, running the registered step function name with input.
func (c *Context) ScheduleStep(id, name string, input any, opts ...StepOption) Decision {
	s := Step{ID: id, Name: name, Input: input}
	for _, o := range opts {
		o(&s)
	}
	return c.ScheduleSteps(s)
}

// ScheduleSteps schedules a batch of steps as one atomic decision. All members are dispatched
// together; the batch's identity (members in order, each member's fields) is validated before any
// member advances. When a member exhausts its retries under ExhaustionFailRun, every unsettled
// sibling is cancelled before the run fails.
func (c *Context) ScheduleSteps(steps ...Step) Decision {
	calls := make([]core.StepCall, len(steps))
	for i, s := range steps {
		in, err := encode(s.Input)
		if err != nil {
			return core.Invalid{What: fmt.Sprintf("input of step %q", s.ID), Err: err}
		}
		calls[i] = core.StepCall{ID: s.ID, Name: s.Name, Input: in}
		if s.Retry != nil {
			calls[i].Retry = *s.Retry
		}
		calls[i].Timeouts = s.timeouts()
	}
	return core.ScheduleSteps{Steps: calls}
}

// WaitUntil waits until deadline (any zone; recorded in UTC). It fires when due, by the worker
// that takes the run's task then (the scheduler's, or its own) or, failing one, by the scheduler;
// the run holds no worker meanwhile. Check [Context.Fired] to go on.
func (c *Context) WaitUntil(id string, deadline time.Time) Decision {
	return core.WaitUntil{ID: id, Deadline: deadline}
}

// Sleep waits for d from [Context.Now]. Re-issuing it while pending is not a change: the
// recorded duration is compared, not a new deadline.
func (c *Context) Sleep(id string, d time.Duration) Decision {
	return core.Sleep{ID: id, Duration: d}
}

// AwaitSignal waits for a signal called name under signal wait waitID. A signal that arrived
// earlier and was not consumed by another wait satisfies it at once. Read it with
// [Context.Signal].
func (c *Context) AwaitSignal(waitID, name string) Decision {
	return core.AwaitSignal{WaitID: waitID, Name: name}
}

// HookOption adjusts [Context.CreateHook].
type HookOption func(*core.CreateHook)

// WithToken sets an explicit hook token instead of the derived, unguessable one. The token must
// be unique among open hooks; whoever knows it can deliver to the hook.
func WithToken(token string) HookOption { return func(h *core.CreateHook) { h.Token = token } }

// CreateHook creates callback endpoint id with metadata (encoded to JSON; nil for none) and
// waits for its one delivery. Its token ([Context.HookToken]) routes a delivery to this run.
func (c *Context) CreateHook(id string, metadata any, opts ...HookOption) Decision {
	h := core.CreateHook{ID: id}
	if metadata != nil {
		m, err := encode(metadata)
		if err != nil {
			return core.Invalid{What: fmt.Sprintf("metadata of hook %q", id), Err: err}
		}
		h.Metadata = m
	}
	for _, o := range opts {
		o(&h)
	}
	return h
}

// Child describes one member of a [Context.StartChildren] batch.
type Child struct {
	// ID is stable and unique within the run; the child's run ID is "<run ID>=<ID>".
	ID string
	// Definition is the child's registered workflow.
	Definition string
	// Input is encoded to JSON.
	Input any
	// CancelPolicy says what happens to the child if this run ends first. Defaults to
	// event.CancelPolicyRequest.
	CancelPolicy event.CancelPolicy
	// Retry, when set, starts a child run that failed again as a new run after the policy's
	// backoff, up to its MaxAttempts (see [WithChildRetry]); nil: no retry.
	Retry *RetryPolicy
}

// ChildOption adjusts a child started with [Context.StartChild].
type ChildOption func(*Child)

// WithCancelPolicy sets what happens to the child when its parent ends first.
func WithCancelPolicy(p event.CancelPolicy) ChildOption { return func(c *Child) { c.CancelPolicy = p } }

// StartChild starts child workflow id of definition with input and waits for it to end. Read
// its result with [Context.Child].
func (c *Context) StartChild(id, definition string, input any, opts ...ChildOption) Decision {
	ch := Child{ID: id, Definition: definition, Input: input}
	for _, o := range opts {
		o(&ch)
	}
	return c.StartChildren(ch)
}

// StartChildren starts a batch of child workflows as one atomic decision.
func (c *Context) StartChildren(children ...Child) Decision {
	calls := make([]core.ChildCall, len(children))
	for i, ch := range children {
		in, err := encode(ch.Input)
		if err != nil {
			return core.Invalid{What: fmt.Sprintf("input of child %q", ch.ID), Err: err}
		}
		calls[i] = core.ChildCall{ID: ch.ID, Definition: ch.Definition, Input: in, CancelPolicy: ch.CancelPolicy, Retry: ch.Retry}
	}
	return core.StartChildren{Children: calls}
}

// Complete ends the run with output (encoded to JSON). Steps that have not settled are
// cancelled first.
func (c *Context) Complete(output any) Decision {
	out, err := encode(output)
	if err != nil {
		return core.Invalid{What: "Complete output", Err: err}
	}
	return core.Complete{Output: out}
}

// Fail ends the run as failed with err. Its kind is [KindOf](err).
func (c *Context) Fail(err error) Decision {
	if err == nil {
		return core.Invalid{What: "Fail", Err: fmt.Errorf("Fail needs a non-nil error")}
	}
	return core.Fail{Error: event.ErrorInfo{Kind: KindOf(err), Message: err.Error()}}
}

// Cancel ends the run as cancelled, typically after clean-up once [Context.CancelRequested]
// reported true.
func (c *Context) Cancel(reason string) Decision {
	return core.Cancel{Reason: reason, Cause: event.CauseWorkflow}
}

// ContinueAsNew ends the run and starts its successor with input and the same definition,
// build ID and patch markers, so that a long-lived workflow keeps its history short. The
// successor's run ID is derived from this one ("<run ID>=<generation>").
func (c *Context) ContinueAsNew(input any) Decision {
	in, err := encode(input)
	if err != nil {
		return core.Invalid{What: "ContinueAsNew input", Err: err}
	}
	return core.ContinueAsNew{Input: in}
}

// encode marshals v to JSON; a json.RawMessage or []byte holding JSON is used as is.
func encode(v any) (json.RawMessage, error) {
	switch v := v.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case json.RawMessage:
		if len(v) == 0 {
			return json.RawMessage("null"), nil
		}
		if !json.Valid(v) {
			return nil, fmt.Errorf("the json.RawMessage is not valid JSON")
		}
		return v, nil
	}
	return json.Marshal(v)
}
