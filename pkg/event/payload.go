package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Payload is the typed data of one event. Every catalogued payload is a pointer to a struct of
// this package; its JSON fields are snake_case and stable.
type Payload interface {
	// EventType returns the catalogue name of the payload.
	EventType() Type
	// Validate reports the first missing or malformed required field.
	Validate() error
}

// Spec is the code identity of a run, fixed by run.started before the first decision. A
// continued-as-new successor inherits it unchanged.
type Spec struct {
	// Definition is the registered workflow name.
	Definition string `json:"definition"`
	// BuildID pins the run to workers that run this build of the code. Empty means any build.
	BuildID string `json:"build_id,omitempty"`
	// Patches are the patch markers active when the run started; ctx.Patched reads them.
	Patches []string `json:"patches,omitempty"`
}

// ParentRef links a child run to the parent that scheduled it.
type ParentRef struct {
	// RunID is the parent run; ChildID the child's ID in it.
	RunID   string `json:"run_id"`
	ChildID string `json:"child_id"`
	// Attempt is the child's attempt this run (or the run it continues) is, under the child's
	// retry policy; 0 for the first.
	Attempt int `json:"attempt,omitempty"`
}

// RunStarted is always the first event of a run, and only the first.
type RunStarted struct {
	// Spec is the code identity the run is decided with; Input the run's input (JSON).
	Spec  Spec            `json:"spec"`
	Input json.RawMessage `json:"input"`
	// Queue is the task queue whose workers drive the run. Empty means the default queue.
	Queue string `json:"queue,omitempty"`
	// Seed is random text chosen at start; generated hook tokens are derived from it so that a
	// replay derives the same token.
	Seed string `json:"seed"`
	// Parent links a child run to its parent; nil for a run started by a client.
	Parent *ParentRef `json:"parent,omitempty"`
	// ContinuedFrom is the run this one continues, with Generation counting continuations.
	ContinuedFrom string `json:"continued_from,omitempty"`
	Generation    int    `json:"generation,omitempty"`
	// TraceParent is the W3C traceparent of the span that started the run (the ingress
	// request, or the parent's decision), when there was one: every span of the run's decisions
	// and step attempts is its child, so that the run is one trace.
	TraceParent string `json:"traceparent,omitempty"`
	// Attributes are the search attributes the run starts with, typed by the definition's
	// declarations (see AttributeDecl); attributes.upserted changes them. Empty for none.
	Attributes Attributes `json:"attributes,omitempty"`
	// NotBefore, when set, delays the run: no decision is made before run.delay_fired, which
	// the scheduler appends once NotBefore has passed (a start delay, or a debounce's quiet
	// period; run.debounced moves it). See docs/start-policies.md.
	NotBefore time.Time `json:"not_before,omitzero"`
	// StartPolicy records the start policies the run was started under and what they did (the
	// run it replaced or reuses the ID of, its dedup or debounce key); nil for a plain start.
	StartPolicy *StartPolicy `json:"start_policy,omitempty"`
	// Priority orders the run's admission under flow control and its step attempts in a
	// worker's queue: higher first. Fixed at start; a child run inherits its parent's.
	Priority int `json:"priority,omitempty"`
	// Control is the flow control the run starts under: it makes no decision until
	// run.admitted. Nil for a run without flow control.
	Control *FlowControl `json:"control,omitempty"`
	// Timeouts are the run's execution and run timeouts and their deadlines (docs/timeouts.md);
	// nil for none. A continuation inherits the execution deadline of the run it continues.
	Timeouts *RunTimeouts `json:"timeouts,omitempty"`
	// ResetFrom records the reset that created the run, with the old run and the point; nil
	// for a run that is not a reset (docs/reset.md).
	ResetFrom *ResetFrom `json:"reset_from,omitempty"`
	// Schedule names the schedule that started the run, the slot it is for and what made it
	// start (a slot, a trigger, a backfill). Nil for a run no schedule started.
	Schedule *ScheduleRef `json:"schedule,omitempty"`
}

// StepSpec is one scheduled step.
type StepSpec struct {
	// ID is the step's ID, unique in the run; Name the registered step function; Input its input
	// (JSON); Retry its retry policy, normalized.
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	Retry RetryPolicy     `json:"retry"`
	// Timeouts are the step's per-attempt timeouts (docs/timeouts.md); nil for none.
	Timeouts *StepTimeouts `json:"timeouts,omitempty"`
}

// StepScheduled records one decision scheduling one step or a batch. Its members are dispatched
// together; attempt 1 of each is in flight from this event on.
type StepScheduled struct {
	// Steps are the steps the decision schedules, in decision order.
	Steps []StepSpec `json:"steps"`
}

// StepCompleted settles a step with its output. Nothing about the step follows it.
type StepCompleted struct {
	// StepID is the step; Attempt the attempt that completed; Output its result (JSON).
	StepID  string          `json:"step_id"`
	Attempt int             `json:"attempt"`
	Output  json.RawMessage `json:"output"`
}

// ErrorInfo describes a failure durably.
type ErrorInfo struct {
	// Kind classifies the error for retry policies (RetryPolicy.NonRetryable) and for callers.
	Kind string `json:"kind"`
	// Message is the error's text.
	Message string `json:"message"`
}

func (e ErrorInfo) Error() string {
	if e.Kind == "" {
		return e.Message
	}
	return e.Kind + ": " + e.Message
}

// StepFailed records a failed attempt. When Final is true the step has settled as failed and
// no retry follows; otherwise a step.retry_scheduled follows in the same commit.
type StepFailed struct {
	// StepID is the step; Attempt the attempt that failed; Error its error.
	StepID  string    `json:"step_id"`
	Attempt int       `json:"attempt"`
	Error   ErrorInfo `json:"error"`
	// Retryable is false when the error may not be retried (non-retryable, or a kind the policy
	// does not retry); Final is set when no attempt follows: the error was not retryable or the
	// attempts ran out.
	Retryable bool `json:"retryable"`
	Final     bool `json:"final"`
	// Timeout names the step timeout that ended the attempt (TimeoutScheduleToStart,
	// TimeoutStartToClose, TimeoutHeartbeat), empty when the step code failed. Error.Kind is the
	// same name, so that a retry policy can list it as non-retryable.
	Timeout string `json:"timeout,omitempty"`
}

// StepRetryScheduled records that Attempt will run once Due has passed.
type StepRetryScheduled struct {
	// StepID is the step; Attempt the attempt scheduled; Due when its backoff ends.
	StepID  string    `json:"step_id"`
	Attempt int       `json:"attempt"`
	Due     time.Time `json:"due"`
}

// StepRetryFired records that a retry's backoff has elapsed: Attempt is in flight from here on.
type StepRetryFired struct {
	// StepID is the step; Attempt the attempt now due.
	StepID  string `json:"step_id"`
	Attempt int    `json:"attempt"`
}

// Cause says who ended a run or cancelled its steps.
type Cause string

const (
	// CauseWorkflow: the workflow code decided it.
	CauseWorkflow Cause = "workflow"
	// CauseStepExhausted: a step ran out of attempts and its policy ends the run.
	CauseStepExhausted Cause = "step_exhausted"
	// CauseCancelRequested: cancellation was requested and the workflow did not handle it.
	CauseCancelRequested Cause = "cancel_requested"
	// CauseOperator: an operator terminated the run.
	CauseOperator Cause = "operator"
	// CauseFlowControl: the run's flow control cancelled it (a concurrency limit was full and
	// its policy is cancel_newest or cancel_oldest).
	CauseFlowControl Cause = "flow_control"
	// CauseTimeout: the run's execution or run timeout passed (docs/timeouts.md).
	CauseTimeout Cause = "timeout"
)

func (c Cause) valid() bool {
	return slices.Contains([]Cause{CauseWorkflow, CauseStepExhausted, CauseCancelRequested, CauseOperator, CauseFlowControl, CauseTimeout}, c)
}

// CancelledStep is one step settled by step.cancelled.
type CancelledStep struct {
	// StepID is the step cancelled.
	StepID string `json:"step_id"`
	// Attempt is the attempt that was in flight or due next.
	Attempt int `json:"attempt"`
	// SideEffectUnknown is true when the attempt may have run: its external effect may or may
	// not have happened, and the host must reconcile by idempotency key before retrying it.
	SideEffectUnknown bool `json:"side_effect_unknown"`
}

// StepCancelled settles steps that will not run again. It precedes the terminal event of a run
// that ends while steps are unsettled.
type StepCancelled struct {
	// Steps are the steps cancelled; Reason why; Cause who cancelled them.
	Steps  []CancelledStep `json:"steps"`
	Reason string          `json:"reason"`
	Cause  Cause           `json:"cause"`
	// Cancellation is set when the workflow cancelled the steps itself (ctx.CancelStep): try_cancel
	// or abandon in the decision's own event, wait_cancelled when the attempt the workflow asked to
	// cancel ended (a step result, not a decision). With abandon the attempt is not told.
	Cancellation Cancellation `json:"cancellation,omitempty"`
}

// Duration is a time.Duration encoded as a Go duration string such as "1m30s".
type Duration time.Duration

// MarshalJSON encodes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON decodes a duration string such as "250ms".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"1m30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// WaitScheduled records a durable timer. Duration is set when the workflow asked to sleep for
// a duration; Deadline is then the recorded time of the preceding event plus Duration.
type WaitScheduled struct {
	// WaitID is the timer's ID in the run; Deadline when it fires; Duration what the workflow
	// asked for (ctx.Sleep's), when it gave one.
	WaitID   string    `json:"wait_id"`
	Deadline time.Time `json:"deadline"`
	Duration Duration  `json:"duration,omitempty"`
}

// WaitFired records that a timer's deadline passed.
type WaitFired struct {
	// WaitID is the timer that fired.
	WaitID string `json:"wait_id"`
}

// SignalAwaited records that the run waits for a signal called Name under WaitID. It binds the
// oldest unconsumed signal of that name, already received or still to come.
type SignalAwaited struct {
	// WaitID is the wait's ID in the run; Name the signal it waits for.
	WaitID string `json:"wait_id"`
	Name   string `json:"name"`
}

// SignalReceived records a delivered signal. DeliveryID deduplicates redeliveries.
type SignalReceived struct {
	// Name is the signal; Payload its data (JSON); DeliveryID identifies the delivery, so that a
	// repeat is recorded once.
	Name       string          `json:"name"`
	Payload    json.RawMessage `json:"payload"`
	DeliveryID string          `json:"delivery_id"`
	// TraceParent is the W3C traceparent of the span that sent the signal, when there was one:
	// the span of the decision that consumes this input links to it.
	TraceParent string `json:"traceparent,omitempty"`
}

// HookCreated records a callback endpoint. Token routes deliveries to this run and hook.
type HookCreated struct {
	// HookID is the hook's ID in the run; Token the secret that routes a delivery to it; Metadata
	// what the workflow attached (JSON), if anything.
	HookID   string          `json:"hook_id"`
	Token    string          `json:"token"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// HookReceived records the delivery to a hook. A hook receives one delivery.
type HookReceived struct {
	// HookID is the hook delivered to; Payload the delivery (JSON); DeliveryID identifies it, so
	// that a repeat is recorded once.
	HookID     string          `json:"hook_id"`
	Payload    json.RawMessage `json:"payload"`
	DeliveryID string          `json:"delivery_id"`
	// TraceParent is the W3C traceparent of the span that delivered to the hook, when there was one:
	// the span of the decision that consumes this input links to it.
	TraceParent string `json:"traceparent,omitempty"`
}

// CancelPolicy says what happens to a child run when its parent ends first.
type CancelPolicy string

const (
	// CancelPolicyRequest asks the child to cancel (run.cancel_requested). The default.
	CancelPolicyRequest CancelPolicy = "request_cancel"
	// CancelPolicyAbandon lets the child run on.
	CancelPolicyAbandon CancelPolicy = "abandon"
)

// Valid reports whether p is a known policy.
func (p CancelPolicy) Valid() bool {
	return p == CancelPolicyRequest || p == CancelPolicyAbandon
}

// ChildSpec is one scheduled child workflow.
type ChildSpec struct {
	// ChildID is the child's ID, unique in the parent; RunID the child run's ID,
	// "<parent>=<ChildID>".
	ChildID string `json:"child_id"`
	RunID   string `json:"run_id"`
	// Definition is the child's workflow; Input its input (JSON).
	Definition string          `json:"definition"`
	Input      json.RawMessage `json:"input"`
	// CancelPolicy says what the parent's end does to the child while it runs.
	CancelPolicy CancelPolicy `json:"cancel_policy"`
	// BuildID and Patches are the spec the child run starts with: the identity of the code
	// that decided to start it, so that whoever starts (or restarts) the child after a deploy
	// starts the same run. Empty in histories recorded before they were; not compared on replay.
	BuildID string   `json:"build_id,omitempty"`
	Patches []string `json:"patches,omitempty"`
	// Retry, when set, starts a child run that failed again, as a new run
	// (ChildAttemptRunID), after the policy's backoff, up to its MaxAttempts; recorded
	// normalized and compared on replay. Nil: a failed child run settles the child as failed.
	Retry *RetryPolicy `json:"retry,omitempty"`
}

// ChildScheduled records one decision starting one child or a batch of children.
type ChildScheduled struct {
	// Children are the children the decision starts, in decision order.
	Children []ChildSpec `json:"children"`
}

// Outcome is how a run ended.
type Outcome string

// The outcomes a run ends with, recorded by its terminal event (run.completed, run.failed,
// run.cancelled, run.continued_as_new) and by a parent's child.settled.
const (
	OutcomeCompleted      Outcome = "completed"
	OutcomeFailed         Outcome = "failed"
	OutcomeCancelled      Outcome = "cancelled"
	OutcomeContinuedAsNew Outcome = "continued_as_new"
)

// Valid reports whether o is a known outcome.
func (o Outcome) Valid() bool {
	return slices.Contains([]Outcome{OutcomeCompleted, OutcomeFailed, OutcomeCancelled, OutcomeContinuedAsNew}, o)
}

// ChildSettled records how a child ended. RunID is the run that ended: the child run itself or
// the last successor it continued as. Output is set when completed, Error when failed or
// cancelled.
type ChildSettled struct {
	// ChildID is the child; RunID the child run that ended (the last of its continuations and
	// retries).
	ChildID string `json:"child_id"`
	RunID   string `json:"run_id"`
	// Outcome is how the child ended; Output its output when it completed, Error its error when it
	// failed or was cancelled.
	Outcome Outcome         `json:"outcome"`
	Output  json.RawMessage `json:"output,omitempty"`
	Error   *ErrorInfo      `json:"error,omitempty"`
	// Cancellation is set when the workflow settled the child itself (ctx.CancelChild with
	// try_cancel or abandon): Outcome is then cancelled and RunID the run that was running,
	// which has not ended (with try_cancel it is asked to).
	Cancellation Cancellation `json:"cancellation,omitempty"`
}

// RunCancelRequested asks the run to cancel. The workflow sees ctx.CancelRequested(); a workflow
// that does not look at it is cancelled at its next decision.
type RunCancelRequested struct {
	// Reason says why the cancellation was asked for.
	Reason string `json:"reason"`
	// TraceParent is the W3C traceparent of the span that requested the cancellation, when there was one:
	// the span of the decision that consumes this input links to it.
	TraceParent string `json:"traceparent,omitempty"`
	// DeliveryID identifies the request, when it named one (a batch job's cancellation of this
	// run): a repeat of it is accepted without effect, even after the run ended.
	DeliveryID string `json:"delivery_id,omitempty"`
	// Parent is set when the run's parent asked for the cancellation (its end, or its
	// decision to cancel the child): the parent's run ID, which must be the run's parent as its
	// run.started records it. Such a request is written by whichever process drives the parent,
	// a worker among them, and needs no input signature (internal/inputsig); any other is an
	// input.
	Parent string `json:"parent,omitempty"`
}

// DecisionFailed records that the workflow code could not make a valid decision (a
// non-determinism error, a panic, an invalid decision). It is recorded once per distinct failure
// and leaves the run Blocked until a later decision succeeds or an operator ends it.
type DecisionFailed struct {
	// Kind classifies the failure (a panic, an error, non-determinism, ...); Code is its stable
	// code (FLOW-REPLAY-2, ...), Detail the message.
	Kind   string `json:"kind"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	// BuildID is the build of the worker whose decision failed.
	BuildID string `json:"build_id,omitempty"`
	// Mismatch is what differs, for a non-determinism failure; nil for other kinds (and in
	// histories recorded before it existed, whose Detail says the same in words).
	Mismatch *Mismatch `json:"mismatch,omitempty"`
}

// Mismatch is the difference a non-determinism failure found between history and the code.
type Mismatch struct {
	// Kind is the kind of identity compared: step, wait, signal_wait, hook, child,
	// continue_as_new, run (spec fields) or decision (a different decision altogether).
	Kind string `json:"kind"`
	// ID is the identity compared (a step ID, a wait ID, ...); empty for run-level fields.
	ID string `json:"id,omitempty"`
	// Field is the field that differs, such as input, name, deadline or decision.
	Field string `json:"field"`
	// Recorded is the value history recorded, at Seq; Produced the one the code gives now.
	Recorded string `json:"recorded"`
	Produced string `json:"produced"`
	// Seq is the sequence of the event that recorded the original value.
	Seq uint64 `json:"seq"`
}

// RunCompleted ends the run with its output.
type RunCompleted struct {
	// Output is the run's result (JSON).
	Output json.RawMessage `json:"output"`
}

// RunFailed ends the run with an error.
type RunFailed struct {
	// Error is the run's error; Cause says who failed it (the workflow, an exhausted step, a
	// timeout, an operator, ...).
	Error ErrorInfo `json:"error"`
	Cause Cause     `json:"cause"`
	// DeliveryID identifies an operator's termination request, when it named one (a batch
	// job's termination of this run): a repeat of it is accepted without effect.
	DeliveryID string `json:"delivery_id,omitempty"`
}

// RunCancelled ends the run as cancelled.
type RunCancelled struct {
	// Reason is the cancellation's; Cause says who ended the run.
	Reason string `json:"reason"`
	Cause  Cause  `json:"cause"`
}

// RunContinuedAsNew ends the run and names its successor, which starts with Input and the same
// Spec.
type RunContinuedAsNew struct {
	// SuccessorRunID is the run that continues this one; Input its input (JSON).
	SuccessorRunID string          `json:"successor_run_id"`
	Input          json.RawMessage `json:"input"`
}

func (*RunStarted) EventType() Type         { return TypeRunStarted }
func (*StepScheduled) EventType() Type      { return TypeStepScheduled }
func (*StepCompleted) EventType() Type      { return TypeStepCompleted }
func (*StepFailed) EventType() Type         { return TypeStepFailed }
func (*StepRetryScheduled) EventType() Type { return TypeStepRetryScheduled }
func (*StepRetryFired) EventType() Type     { return TypeStepRetryFired }
func (*StepCancelled) EventType() Type      { return TypeStepCancelled }
func (*WaitScheduled) EventType() Type      { return TypeWaitScheduled }
func (*WaitFired) EventType() Type          { return TypeWaitFired }
func (*SignalAwaited) EventType() Type      { return TypeSignalAwaited }
func (*SignalReceived) EventType() Type     { return TypeSignalReceived }
func (*HookCreated) EventType() Type        { return TypeHookCreated }
func (*HookReceived) EventType() Type       { return TypeHookReceived }
func (*ChildScheduled) EventType() Type     { return TypeChildScheduled }
func (*ChildSettled) EventType() Type       { return TypeChildSettled }
func (*RunCancelRequested) EventType() Type { return TypeRunCancelRequested }
func (*DecisionFailed) EventType() Type     { return TypeDecisionFailed }
func (*RunCompleted) EventType() Type       { return TypeRunCompleted }
func (*RunFailed) EventType() Type          { return TypeRunFailed }
func (*RunCancelled) EventType() Type       { return TypeRunCancelled }
func (*RunContinuedAsNew) EventType() Type  { return TypeRunContinuedAsNew }

// The payload fields of the events above (Described).

func (p *RunStarted) PayloadFields() []*json.RawMessage { return []*json.RawMessage{&p.Input} }
func (p *StepScheduled) PayloadFields() []*json.RawMessage {
	out := make([]*json.RawMessage, len(p.Steps))
	for i := range p.Steps {
		out[i] = &p.Steps[i].Input
	}
	return out
}
func (p *StepCompleted) PayloadFields() []*json.RawMessage    { return []*json.RawMessage{&p.Output} }
func (*StepFailed) PayloadFields() []*json.RawMessage         { return nil }
func (*StepRetryScheduled) PayloadFields() []*json.RawMessage { return nil }
func (*StepRetryFired) PayloadFields() []*json.RawMessage     { return nil }
func (*StepCancelled) PayloadFields() []*json.RawMessage      { return nil }
func (*WaitScheduled) PayloadFields() []*json.RawMessage      { return nil }
func (*WaitFired) PayloadFields() []*json.RawMessage          { return nil }
func (*SignalAwaited) PayloadFields() []*json.RawMessage      { return nil }
func (p *SignalReceived) PayloadFields() []*json.RawMessage   { return []*json.RawMessage{&p.Payload} }
func (p *HookCreated) PayloadFields() []*json.RawMessage      { return []*json.RawMessage{&p.Metadata} }
func (p *HookReceived) PayloadFields() []*json.RawMessage     { return []*json.RawMessage{&p.Payload} }
func (p *ChildScheduled) PayloadFields() []*json.RawMessage {
	out := make([]*json.RawMessage, len(p.Children))
	for i := range p.Children {
		out[i] = &p.Children[i].Input
	}
	return out
}
func (p *ChildSettled) PayloadFields() []*json.RawMessage     { return []*json.RawMessage{&p.Output} }
func (*RunCancelRequested) PayloadFields() []*json.RawMessage { return nil }
func (*DecisionFailed) PayloadFields() []*json.RawMessage     { return nil }
func (p *RunCompleted) PayloadFields() []*json.RawMessage     { return []*json.RawMessage{&p.Output} }
func (*RunFailed) PayloadFields() []*json.RawMessage          { return nil }
func (*RunCancelled) PayloadFields() []*json.RawMessage       { return nil }
func (p *RunContinuedAsNew) PayloadFields() []*json.RawMessage {
	return []*json.RawMessage{&p.Input}
}

// The summaries of the events above (Described).

func (p *RunStarted) Summarize() string {
	s := fmt.Sprintf("%s started, input %s", p.Spec.Definition, inline(p.Input))
	if p.Spec.BuildID != "" {
		s += ", build " + p.Spec.BuildID
	}
	if p.Parent != nil {
		s += fmt.Sprintf(", child %s of run %s", p.Parent.ChildID, p.Parent.RunID)
	}
	if p.ContinuedFrom != "" {
		s += fmt.Sprintf(", continues %s (generation %d)", p.ContinuedFrom, p.Generation)
	}
	if len(p.Attributes) > 0 {
		s += ", attributes " + p.Attributes.pairs()
	}
	if p.Priority != 0 {
		s += fmt.Sprintf(", priority %d", p.Priority)
	}
	if p.Control != nil {
		s += ", under flow control: " + p.Control.Describe()
	}
	if r := p.ResetFrom; r != nil {
		s += fmt.Sprintf(", reset from %s at seq %d (%s)", r.RunID, r.Seq, r.Mode)
	}
	return s + p.startPolicySummary() + p.Schedule.summary()
}

func (p *StepScheduled) Summarize() string {
	parts := make([]string, len(p.Steps))
	for i, st := range p.Steps {
		parts[i] = fmt.Sprintf("%s (%s) %s", st.ID, st.Name, inline(st.Input))
	}
	return "schedule " + strings.Join(parts, "; ")
}

func (p *StepCompleted) Summarize() string {
	return fmt.Sprintf("%s completed, attempt %d → %s", p.StepID, p.Attempt, inline(p.Output))
}

func (p *StepFailed) Summarize() string {
	s := fmt.Sprintf("%s attempt %d failed: %s", p.StepID, p.Attempt, p.Error.Error())
	if p.Final {
		s += " (final)"
	} else if p.Retryable {
		s += " (will retry)"
	}
	return s
}

func (p *StepRetryScheduled) Summarize() string {
	return fmt.Sprintf("%s attempt %d due %s", p.StepID, p.Attempt, p.Due.Format(summaryClock))
}

func (p *StepRetryFired) Summarize() string {
	return fmt.Sprintf("%s attempt %d in flight", p.StepID, p.Attempt)
}

func (p *StepCancelled) Summarize() string {
	ids := make([]string, len(p.Steps))
	for i, st := range p.Steps {
		ids[i] = st.StepID
		if st.SideEffectUnknown {
			ids[i] += " (side effect unknown)"
		}
	}
	return fmt.Sprintf("cancelled %s: %s (%s)", strings.Join(ids, ", "), p.Reason, p.Cause)
}

func (p *WaitScheduled) Summarize() string {
	s := fmt.Sprintf("timer %s until %s", p.WaitID, p.Deadline.Format(summaryDate))
	if p.Duration != 0 {
		s += fmt.Sprintf(" (%s)", time.Duration(p.Duration))
	}
	return s
}

func (p *WaitFired) Summarize() string { return fmt.Sprintf("timer %s fired", p.WaitID) }

func (p *SignalAwaited) Summarize() string {
	return fmt.Sprintf("await signal %q as %s", p.Name, p.WaitID)
}

func (p *SignalReceived) Summarize() string {
	return fmt.Sprintf("signal %q received %s", p.Name, inline(p.Payload))
}

func (p *HookCreated) Summarize() string {
	return fmt.Sprintf("hook %s created, token %s", p.HookID, p.Token)
}

func (p *HookReceived) Summarize() string {
	return fmt.Sprintf("hook %s received %s", p.HookID, inline(p.Payload))
}

func (p *ChildScheduled) Summarize() string {
	parts := make([]string, len(p.Children))
	for i, c := range p.Children {
		parts[i] = fmt.Sprintf("%s (%s) as run %s", c.ChildID, c.Definition, c.RunID)
	}
	return "start child " + strings.Join(parts, "; ")
}

func (p *ChildSettled) Summarize() string {
	s := fmt.Sprintf("child %s %s", p.ChildID, p.Outcome)
	switch {
	case p.Error != nil:
		s += ": " + p.Error.Error()
	case len(p.Output) > 0:
		s += " → " + inline(p.Output)
	}
	return s
}

func (p *RunCancelRequested) Summarize() string { return "cancel requested: " + orNone(p.Reason) }

func (p *DecisionFailed) Summarize() string {
	return fmt.Sprintf("decision failed [%s] %s: %s", p.Code, p.Kind, clip(p.Detail, 160))
}

func (p *RunCompleted) Summarize() string { return "completed → " + inline(p.Output) }

func (p *RunFailed) Summarize() string {
	return fmt.Sprintf("failed: %s (%s)", p.Error.Error(), p.Cause)
}

func (p *RunCancelled) Summarize() string {
	return fmt.Sprintf("cancelled: %s (%s)", orNone(p.Reason), p.Cause)
}

func (p *RunContinuedAsNew) Summarize() string {
	return fmt.Sprintf("continued as new as run %s, input %s", p.SuccessorRunID, inline(p.Input))
}

// fieldError names a missing or malformed field.
func fieldError(field, problem string) error {
	return fmt.Errorf("field %q %s", field, problem)
}

func required(field, v string) error {
	if v == "" {
		return fieldError(field, "is required")
	}
	return nil
}

func requiredJSON(field string, v json.RawMessage) error {
	if len(v) == 0 {
		return fieldError(field, "is required (use null for no value)")
	}
	if !json.Valid(v) {
		return fieldError(field, "is not valid JSON")
	}
	return nil
}

func optionalJSON(field string, v json.RawMessage) error {
	if len(v) > 0 && !json.Valid(v) {
		return fieldError(field, "is not valid JSON")
	}
	return nil
}

func attempt(field string, v int) error {
	if v < 1 {
		return fieldError(field, fmt.Sprintf("must be at least 1, got %d", v))
	}
	return nil
}

// Validate implements Payload.
func (p *RunStarted) Validate() error {
	return errors.Join(required("spec.definition", p.Spec.Definition), requiredJSON("input", p.Input),
		required("seed", p.Seed), validateParent(p.Parent), validateStartAttributes(p.Attributes), p.StartPolicy.validate(),
		validateControl(p.Control), p.Timeouts.validate(), p.ResetFrom.validate())
}

func validateStartAttributes(a Attributes) error {
	if err := a.Validate(); err != nil {
		return fieldError("attributes", err.Error())
	}
	return nil
}

func validateControl(c *FlowControl) error {
	if c == nil {
		return nil
	}
	return c.Validate()
}

func validateParent(p *ParentRef) error {
	if p == nil {
		return nil
	}
	return errors.Join(required("parent.run_id", p.RunID), required("parent.child_id", p.ChildID))
}

// Validate implements Payload.
func (p *StepScheduled) Validate() error {
	if len(p.Steps) == 0 {
		return fieldError("steps", "must list at least one step")
	}
	for i, s := range p.Steps {
		f := fmt.Sprintf("steps[%d].", i)
		if err := errors.Join(required(f+"id", s.ID), required(f+"name", s.Name),
			requiredJSON(f+"input", s.Input), s.Retry.Validate(), s.Timeouts.validate(f+"timeouts.")); err != nil {
			return err
		}
	}
	return nil
}

// Validate implements Payload.
func (p *StepCompleted) Validate() error {
	return errors.Join(required("step_id", p.StepID), attempt("attempt", p.Attempt),
		requiredJSON("output", p.Output))
}

// Validate implements Payload.
func (p *StepFailed) Validate() error {
	return errors.Join(required("step_id", p.StepID), attempt("attempt", p.Attempt),
		required("error.message", p.Error.Message), validateTimeoutKind(p.Timeout))
}

// Validate implements Payload.
func (p *StepRetryScheduled) Validate() error {
	var due error
	if p.Due.IsZero() {
		due = fieldError("due", "is required")
	}
	return errors.Join(required("step_id", p.StepID), attempt("attempt", p.Attempt), due)
}

// Validate implements Payload.
func (p *StepRetryFired) Validate() error {
	return errors.Join(required("step_id", p.StepID), attempt("attempt", p.Attempt))
}

// Validate implements Payload.
func (p *StepCancelled) Validate() error {
	if len(p.Steps) == 0 {
		return fieldError("steps", "must list at least one step")
	}
	for i, s := range p.Steps {
		f := fmt.Sprintf("steps[%d].", i)
		if err := errors.Join(required(f+"step_id", s.StepID), attempt(f+"attempt", s.Attempt)); err != nil {
			return err
		}
	}
	return errors.Join(validCause(p.Cause), validCancellation("cancellation", p.Cancellation, true))
}

func validCause(c Cause) error {
	if !c.valid() {
		return fieldError("cause", fmt.Sprintf("must be one of workflow, step_exhausted, cancel_requested, operator, flow_control; got %q", c))
	}
	return nil
}

// Validate implements Payload.
func (p *WaitScheduled) Validate() error {
	var deadline error
	if p.Deadline.IsZero() {
		deadline = fieldError("deadline", "is required")
	}
	return errors.Join(required("wait_id", p.WaitID), deadline)
}

// Validate implements Payload.
func (p *WaitFired) Validate() error { return required("wait_id", p.WaitID) }

// Validate implements Payload.
func (p *SignalAwaited) Validate() error {
	return errors.Join(required("wait_id", p.WaitID), required("name", p.Name))
}

// Validate implements Payload.
func (p *SignalReceived) Validate() error {
	return errors.Join(required("name", p.Name), requiredJSON("payload", p.Payload),
		required("delivery_id", p.DeliveryID))
}

// Validate implements Payload.
func (p *HookCreated) Validate() error {
	return errors.Join(required("hook_id", p.HookID), required("token", p.Token),
		optionalJSON("metadata", p.Metadata))
}

// Validate implements Payload.
func (p *HookReceived) Validate() error {
	return errors.Join(required("hook_id", p.HookID), requiredJSON("payload", p.Payload),
		required("delivery_id", p.DeliveryID))
}

// Validate implements Payload.
func (p *ChildScheduled) Validate() error {
	if len(p.Children) == 0 {
		return fieldError("children", "must list at least one child")
	}
	for i, c := range p.Children {
		f := fmt.Sprintf("children[%d].", i)
		var policy error
		if !c.CancelPolicy.Valid() {
			policy = fieldError(f+"cancel_policy", fmt.Sprintf("must be request_cancel or abandon; got %q", c.CancelPolicy))
		}
		var retry error
		if c.Retry != nil {
			retry = c.Retry.Validate()
		}
		if err := errors.Join(required(f+"child_id", c.ChildID), required(f+"run_id", c.RunID),
			required(f+"definition", c.Definition), requiredJSON(f+"input", c.Input), policy, retry); err != nil {
			return err
		}
	}
	return nil
}

// Validate implements Payload.
func (p *ChildSettled) Validate() error {
	var outcome error
	if !p.Outcome.Valid() || p.Outcome == OutcomeContinuedAsNew {
		outcome = fieldError("outcome", fmt.Sprintf("must be completed, failed or cancelled; got %q", p.Outcome))
	}
	var cancelled error
	if p.Cancellation != "" && p.Outcome != OutcomeCancelled {
		cancelled = fieldError("outcome", fmt.Sprintf("must be cancelled with a cancellation; got %q", p.Outcome))
	}
	return errors.Join(required("child_id", p.ChildID), required("run_id", p.RunID), outcome,
		optionalJSON("output", p.Output), validCancellation("cancellation", p.Cancellation, true), cancelled)
}

// Validate implements Payload.
func (p *RunCancelRequested) Validate() error { return nil }

// Validate implements Payload.
func (p *DecisionFailed) Validate() error {
	return errors.Join(required("kind", p.Kind), required("detail", p.Detail))
}

// Validate implements Payload.
func (p *RunCompleted) Validate() error { return requiredJSON("output", p.Output) }

// Validate implements Payload.
func (p *RunFailed) Validate() error {
	return errors.Join(required("error.message", p.Error.Message), validCause(p.Cause))
}

// Validate implements Payload.
func (p *RunCancelled) Validate() error { return validCause(p.Cause) }

// Validate implements Payload.
func (p *RunContinuedAsNew) Validate() error {
	return errors.Join(required("successor_run_id", p.SuccessorRunID), requiredJSON("input", p.Input))
}
