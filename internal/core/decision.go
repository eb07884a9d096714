package core

import (
	"encoding/json"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// Decision is the one thing workflow code asks for at a decision point. The concrete types are
// the structs of this file; workflow code builds them through flow.Context.
type Decision interface {
	// Describe renders the decision for diagnostics, e.g. `ScheduleStep("read-rate")`.
	Describe() string
	decision()
}

// StepCall is one step of a ScheduleSteps decision.
type StepCall struct {
	ID    string
	Name  string
	Input json.RawMessage
	// Retry is normalized by Validate before it is compared or recorded.
	Retry event.RetryPolicy
	// Timeouts are the step's per-attempt timeouts; nil (or all zero) for none.
	Timeouts *event.StepTimeouts
}

// ScheduleSteps schedules one step or an atomic batch. The batch's whole identity (its members
// in order, and each member's fields) is validated before any member advances.
type ScheduleSteps struct{ Steps []StepCall }

// WaitUntil waits until a UTC deadline.
type WaitUntil struct {
	ID       string
	Deadline time.Time
}

// Sleep waits for Duration from the recorded time of the latest event (ctx.Now()). When the
// wait is already recorded, the duration is compared, so re-issuing Sleep later is not a change.
type Sleep struct {
	ID       string
	Duration time.Duration
}

// AwaitSignal waits for the oldest unconsumed signal called Name, bound to WaitID.
type AwaitSignal struct{ WaitID, Name string }

// CreateHook creates a callback endpoint. An empty Token is derived from the run's seed and the
// hook ID, so that it is unguessable and a replay derives the same token.
type CreateHook struct {
	ID       string
	Token    string
	Metadata json.RawMessage
}

// ChildCall is one child of a StartChildren decision.
type ChildCall struct {
	ID           string
	Definition   string
	Input        json.RawMessage
	CancelPolicy event.CancelPolicy
	// Retry, when set, starts a failed child run again as a new run after the policy's
	// backoff (normalized by Validate; OnExhaustion does not apply); nil: no retry.
	Retry *event.RetryPolicy
}

// StartChildren starts one child workflow or an atomic batch of them.
type StartChildren struct{ Children []ChildCall }

// Complete ends the run with Output.
type Complete struct{ Output json.RawMessage }

// Fail ends the run with Error.
type Fail struct{ Error event.ErrorInfo }

// Cancel ends the run as cancelled. Cause is CauseWorkflow when the workflow decided it, or
// CauseCancelRequested when a requested cancellation was not handled by the workflow.
type Cancel struct {
	Reason string
	Cause  event.Cause
}

// ContinueAsNew ends the run and starts its successor with Input and the same spec.
type ContinueAsNew struct{ Input json.RawMessage }

// Invalid is a decision that could not be built, for example because its input did not encode
// to JSON. Validating it returns an *InvalidDecisionError carrying Err.
type Invalid struct {
	What string
	Err  error
}

func (ScheduleSteps) decision()    {}
func (WaitUntil) decision()        {}
func (Sleep) decision()            {}
func (AwaitSignal) decision()      {}
func (CreateHook) decision()       {}
func (StartChildren) decision()    {}
func (Complete) decision()         {}
func (Fail) decision()             {}
func (Cancel) decision()           {}
func (ContinueAsNew) decision()    {}
func (Invalid) decision()          {}
func (RecordSideEffect) decision() {}

func (d ScheduleSteps) Describe() string {
	return describeBatch("ScheduleStep", "ScheduleSteps", idsOf(d.Steps, func(s StepCall) string { return s.ID }))
}
func (d WaitUntil) Describe() string   { return describe("WaitUntil", d.ID) }
func (d Sleep) Describe() string       { return describe("Sleep", d.ID) }
func (d AwaitSignal) Describe() string { return describe("AwaitSignal", d.WaitID, d.Name) }
func (d CreateHook) Describe() string  { return describe("CreateHook", d.ID) }
func (d StartChildren) Describe() string {
	return describeBatch("StartChild", "StartChildren", idsOf(d.Children, func(c ChildCall) string { return c.ID }))
}
func (Complete) Describe() string           { return "Complete" }
func (Fail) Describe() string               { return "Fail" }
func (Cancel) Describe() string             { return "Cancel" }
func (ContinueAsNew) Describe() string      { return "ContinueAsNew" }
func (d Invalid) Describe() string          { return "invalid " + d.What }
func (d RecordSideEffect) Describe() string { return describe("SideEffect", d.ID) }

func describe(name string, ids ...string) string {
	b := []byte(name + "(")
	for i, id := range ids {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '"')
		b = append(b, id...)
		b = append(b, '"')
	}
	return string(append(b, ')'))
}

// describeBatch describes a decision of a batch of ids: as one, named one, if it has one member.
func describeBatch(one, many string, ids []string) string {
	if len(ids) == 1 {
		return describe(one, ids...)
	}
	return describe(many, ids...)
}
