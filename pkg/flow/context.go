package flow

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/pkg/event"
)

// Context is what workflow code sees at one decision point: the run's input and everything its
// history recorded, read through the methods below, and the constructors of the one [Decision]
// the code returns. Every reader is a pure function of the history, so the same history always
// reads the same; [Context.Now] is the recorded time of the latest event, not the wall clock.
//
// A Context is valid only during the call it was passed to and is not safe for concurrent use.
type Context struct {
	s          *core.Snapshot
	replaying  bool
	cancelSeen bool
	logger     *slog.Logger
	runLogger  *slog.Logger // logger with the run's ID, made on first use
	// randoms and uuids count the calls of Random and UUID in this evaluation of the code.
	randoms, uuids uint64
	// query is set when the code is evaluated to answer a query (see HandleQuery): nothing it
	// returns is recorded, and side effects are not run.
	query *queryEval
	// attributes are the search attributes the workflow declares.
	attributes []SearchAttribute
	// payloads reads the payloads the history holds by reference; nil reads none.
	payloads payload.Getter
	// view is the read-only view of s, made on the first call of Snapshot.
	view *Snapshot
}

// RunID returns the ID of the run.
func (c *Context) RunID() string { return c.s.RunID }

// Definition returns the workflow's registered name.
func (c *Context) Definition() string { return c.s.Spec.Definition }

// RawInput returns the run's input as recorded.
func (c *Context) RawInput() json.RawMessage { return c.resolved(c.s.Input) }

// Input decodes the run's input into v.
func (c *Context) Input(v any) error {
	if err := json.Unmarshal(c.resolved(c.s.Input), v); err != nil {
		return fmt.Errorf("decoding the input of run %q: %w", c.s.RunID, err)
	}
	return nil
}

// Now returns the recorded UTC time of the run's latest event. It is the same on every replay
// of the same history; use it instead of time.Now.
func (c *Context) Now() time.Time { return c.s.UpdatedAt }

// StepOutput returns the output of step id once it completed, else nil.
func (c *Context) StepOutput(id string) json.RawMessage {
	if st, ok := c.s.Steps[id]; ok && st.Status == core.StepCompleted {
		return c.resolved(st.Output)
	}
	return nil
}

// StepError returns a *StepFailure once step id settled without completing: it failed for the
// last time under ExhaustionReturnError, or it was cancelled. Otherwise nil.
func (c *Context) StepError(id string) error {
	st, ok := c.s.Steps[id]
	if !ok || !st.Status.Settled() || st.Status == core.StepCompleted {
		return nil
	}
	f := &StepFailure{StepID: st.ID, Name: st.Name, Attempt: st.Attempt, Cancelled: st.Status == core.StepCancelled}
	if st.Error != nil {
		f.Kind, f.Message = st.Error.Kind, st.Error.Message
	}
	if f.Cancelled {
		f.Kind, f.Message = "cancelled", "the step was cancelled"
	}
	return f
}

// Signal returns the payload of the signal bound to signal wait waitID, else nil.
func (c *Context) Signal(waitID string) json.RawMessage {
	if w, ok := c.s.SignalWaits[waitID]; ok && w.Received() {
		return c.resolved(c.s.Signals[w.Signal].Payload)
	}
	return nil
}

// Hook returns the payload delivered to hook id, else nil.
func (c *Context) Hook(id string) json.RawMessage {
	if h, ok := c.s.Hooks[id]; ok && h.Received {
		return c.resolved(h.Payload)
	}
	return nil
}

// HookToken returns the token of hook id: the recorded one once the hook is created, before
// that the token [Context.CreateHook] will derive when no explicit token is given. Hand it to the
// party that will call back, for example in the input of a step that sends it.
func (c *Context) HookToken(id string) string {
	if h, ok := c.s.Hooks[id]; ok {
		return h.Token
	}
	return core.HookToken(c.s.Seed, c.s.RunID, id)
}

// Child returns how child id ended, or nil while it runs.
func (c *Context) Child(id string) *ChildResult {
	ch, ok := c.s.Children[id]
	if !ok || !ch.Settled {
		return nil
	}
	r := &ChildResult{RunID: ch.EndedRunID, Outcome: ch.Outcome, Output: c.resolved(ch.Output)}
	if ch.Error != nil {
		r.Err = &ChildFailure{ChildID: id, RunID: ch.EndedRunID, Outcome: ch.Outcome, Kind: ch.Error.Kind, Message: ch.Error.Message}
	}
	return r
}

// Fired reports whether wait id has fired.
func (c *Context) Fired(id string) bool {
	w, ok := c.s.Waits[id]
	return ok && w.Fired
}

// Patched reports whether the run started with patch marker name, so that code changed under
// that marker takes its new branch only in runs that started after the change. Declare markers
// with [WithPatches] when registering the workflow.
func (c *Context) Patched(name string) bool { return slices.Contains(c.s.Spec.Patches, name) }

// CancelRequested reports whether cancellation of the run was requested. A workflow that calls
// it takes charge of cancellation: it may run clean-up steps and end with [Context.Cancel] (or
// any other ending). A workflow that never calls it while cancellation is requested is cancelled
// at its next decision: unsettled steps are cancelled and the run ends cancelled.
func (c *Context) CancelRequested() bool {
	c.cancelSeen = true
	return c.s.CancelRequested
}

// IsReplaying reports whether the code is being replayed against recorded decisions (to verify
// a history) rather than asked for a new one.
func (c *Context) IsReplaying() bool { return c.replaying }

// Logger returns a logger with the run's ID attached. It discards records while replaying, so
// that verifying a history does not repeat its log lines.
func (c *Context) Logger() *slog.Logger {
	if c.runLogger == nil {
		c.runLogger = c.logger.With(slog.String("run_id", c.s.RunID))
	}
	return c.runLogger
}

// Snapshot returns the projection of the run's history, for reading only: the same view for
// every call during one decision. Payload fields hold what history holds (a reference for an
// offloaded payload); read payloads through the Context's readers, which resolve them.
func (c *Context) Snapshot() *Snapshot {
	if c.view == nil {
		c.view = viewOf(c.s)
	}
	return c.view
}

// ChildResult is how a child workflow ended.
type ChildResult struct {
	// RunID is the run that ended: the child run or the last run it continued as.
	RunID string
	// Outcome is completed, failed or cancelled.
	Outcome event.Outcome
	// Output is the child's output when it completed.
	Output json.RawMessage
	// Err is a *ChildFailure when the child failed or was cancelled.
	Err error
}

// ChildFailure is the error of a child that failed or was cancelled.
type ChildFailure struct {
	// ChildID is the child's ID in the parent; RunID the child's run that ended.
	ChildID, RunID string
	// Outcome is failed or cancelled.
	Outcome event.Outcome
	// Kind and Message are the child's error (Kind "cancelled" when it was cancelled).
	Kind, Message string
}

func (e *ChildFailure) Error() string {
	return fmt.Sprintf("child %q (run %q) %s: %s", e.ChildID, e.RunID, e.Outcome, e.Message)
}

// ErrorKind returns the kind of the child's error, so that ctx.Fail(err) fails the parent with
// the child's kind (see [KindOf]).
func (e *ChildFailure) ErrorKind() string { return e.Kind }

// StepFailure is the error of a step that settled without completing.
type StepFailure struct {
	// StepID is the step's ID in the run; Name the registered step function.
	StepID, Name string
	// Attempt is the last attempt.
	Attempt int
	// Kind and Message are the last attempt's error.
	Kind    string
	Message string
	// Cancelled is set when the step was cancelled rather than failed.
	Cancelled bool
}

func (e *StepFailure) Error() string {
	if e.Cancelled {
		return fmt.Sprintf("step %q (%s) was cancelled at attempt %d", e.StepID, e.Name, e.Attempt)
	}
	return fmt.Sprintf("step %q (%s) failed after %d attempt(s): %s", e.StepID, e.Name, e.Attempt, event.ErrorInfo{Kind: e.Kind, Message: e.Message}.Error())
}

// ErrorKind returns the failure's kind, for [KindOf].
func (e *StepFailure) ErrorKind() string { return e.Kind }
