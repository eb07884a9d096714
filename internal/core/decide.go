package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/flowrun/flow/pkg/event"
)

// Identity is what the code registered for a definition declares about itself.
type Identity struct {
	// BuildID identifies the build of the code; a run pinned to another build is never decided.
	BuildID string
	// Patches are the patch markers the code knows. Every marker a run recorded must be known.
	Patches []string
	// Attributes are the search attributes the code declares: an upsert may set only these,
	// each with a value of its declared type.
	Attributes []event.AttributeDecl
}

// Decider is the runtime seam between the core and workflow code: Decide asks it for the next
// decision of a run, and it runs the code registered for the run's definition (the SDK's
// registry implements it; tests implement it with scripted decisions).
type Decider interface {
	// Identity returns the identity of the code registered for definition, or an error wrapping
	// ErrNotFound if there is none.
	Identity(definition string) (Identity, error)
	// RunWorkflow asks the code of definition for exactly one decision, given the run's input
	// and its history projected as a snapshot, which it must not modify. A panic in workflow
	// code is returned as a *PanicError.
	RunWorkflow(definition string, input json.RawMessage, history *Snapshot) (Decision, error)
}

// DecideOptions adjust Decide for replay tools. The zero value is what workers use.
type DecideOptions struct {
	// IgnoreBuildID skips the build ID check, for replaying old histories against new code.
	IgnoreBuildID bool
}

// Decide makes the run's next decision. It first applies the automatic transition (a step that
// exhausted its retries under ExhaustionFailRun fails the run: step.cancelled for every unsettled
// step, then run.failed), then checks that the code may replay this run (build ID and patch
// markers), then asks the code and validates its decision. It returns the verdict of Validate,
// or an error that blocks the run: see DecisionFailure. Decide does not modify s.
func Decide(s *Snapshot, d Decider, opts DecideOptions) (Verdict, error) {
	if s.Seq == 0 {
		return Verdict{}, fmt.Errorf("%w: run %q has not started", ErrNotFound, s.RunID)
	}
	if s.Terminal() {
		return Verdict{}, fmt.Errorf("%w: run %q ended at seq %d", ErrTerminal, s.RunID, s.Outcome.Seq)
	}
	if s.Paused != nil {
		return pausedVerdict(s), nil
	}
	if s.Delayed {
		return delayedVerdict(s), nil
	}
	if s.Queued() && !s.Copied(s.Seq+1) {
		// A reset run replaying its copied decisions decided them admitted, in the old run.
		return queuedVerdict(s)
	}
	if events := exhaustion(s); events != nil {
		return Verdict{Events: events}, nil
	}
	id, err := d.Identity(s.Spec.Definition)
	if err != nil {
		return Verdict{}, err
	}
	if err := CheckIdentity(s, id, opts); err != nil {
		return Verdict{}, err
	}
	// Updates received since the last decision are judged first, one per decision, oldest
	// first; the workflow's own decision (a pending step, a wait) is asked for once none is
	// left, and re-issued unchanged.
	if v, ok, err := decideUpdate(s, d); ok || err != nil {
		return v, err
	}
	dec, err := d.RunWorkflow(s.Spec.Definition, s.Input, s)
	if err != nil {
		return Verdict{}, err
	}
	if err := CheckDeclared(s.RunID, dec, id.Attributes); err != nil {
		return Verdict{}, err
	}
	v, err := Validate(s, dec)
	if err == nil {
		pinChildren(v.Events, d)
	}
	return v, err
}

// pinChildren records in new child.scheduled events the spec each child starts with: the
// identity of the code deciding now, when it registers the child's definition (else the child
// runs any build's code of its definition).
func pinChildren(events []event.Payload, d Decider) {
	for _, p := range events {
		c, ok := p.(*event.ChildScheduled)
		if !ok {
			continue
		}
		for i := range c.Children {
			if id, err := d.Identity(c.Children[i].Definition); err == nil {
				c.Children[i].BuildID, c.Children[i].Patches = id.BuildID, slices.Clone(id.Patches)
			}
		}
	}
}

// CheckIdentity reports a *NonDeterminismError if code of identity id may not decide the run:
// the run is pinned to another build, or it recorded a patch marker the code does not declare.
func CheckIdentity(s *Snapshot, id Identity, opts DecideOptions) error {
	if !opts.IgnoreBuildID && s.Spec.BuildID != "" && s.Spec.BuildID != id.BuildID {
		return mismatch(s.RunID, "run", "", "build_id", s.Spec.BuildID, id.BuildID, 1)
	}
	for _, p := range s.Spec.Patches {
		if !slices.Contains(id.Patches, p) {
			return mismatch(s.RunID, "run", "", "patches", s.Spec.Patches, id.Patches, 1)
		}
	}
	return nil
}

// exhaustion returns the events that fail the run because a step exhausted its retries under
// ExhaustionFailRun, or nil.
func exhaustion(s *Snapshot) []event.Payload {
	if len(s.exhausted) == 0 {
		return nil
	}
	st := s.Steps[s.exhausted[0]]
	e := event.ErrorInfo{Kind: st.Error.Kind,
		Message: fmt.Sprintf("step %q (%s) failed after %d attempt(s): %s", st.ID, st.Name, st.Attempt, st.Error.Message)}
	reason := fmt.Sprintf("step %q failed for the last time and its retry policy ends the run", st.ID)
	return endEvents(s, &event.RunFailed{Error: e, Cause: event.CauseStepExhausted}, event.CauseStepExhausted, reason)
}

// PanicError is a panic recovered from workflow code.
type PanicError struct {
	Value any
	// Stack is the goroutine stack at the panic, from runtime/debug.Stack.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("flow: [%s] workflow code panicked: %v", CodePanic, e.Value)
}

// Location returns the innermost frames of the stack that belong to the code that panicked, as
// "function (file:line)" lines without arguments or offsets, so that the same panic renders the
// same on every worker of a build.
func (e *PanicError) Location() string {
	lines := strings.Split(string(e.Stack), "\n")
	var frames []string
	for i := 1; i+1 < len(lines) && len(frames) < 3; i += 2 {
		fn, loc := strings.TrimSpace(lines[i]), strings.TrimSpace(lines[i+1])
		if fn == "" {
			break
		}
		if j := strings.LastIndexByte(fn, '('); j > 0 {
			fn = fn[:j]
		}
		if j := strings.LastIndex(loc, " +0x"); j > 0 {
			loc = loc[:j]
		}
		if strings.HasPrefix(fn, "runtime/debug.") || strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "panic") ||
			strings.HasPrefix(fn, flowPackage) {
			continue
		}
		frames = append(frames, fmt.Sprintf("%s (%s)", fn, loc))
	}
	return strings.Join(frames, "; ")
}

// flowPackage prefixes the frames of the SDK that calls workflow code, which Location skips.
const flowPackage = "github.com/flowrun/flow/pkg/flow."

// Failure kinds recorded in decision.failed.
const (
	FailureNonDeterminism    = "nondeterminism"
	FailureInvalidDecision   = "invalid_decision"
	FailurePanic             = "panic"
	FailureUnknownDefinition = "unknown_definition"
	FailureError             = "error"
)

// DecisionFailure returns the decision.failed event that records err, returned by Decide, for a
// worker of build buildID. Two failures are the same when their events are equal; a worker
// records a failure only if it differs from the run's current Blocked.
func DecisionFailure(err error, buildID string) *event.DecisionFailed {
	f := &event.DecisionFailed{Kind: FailureError, Code: CodeNoDecision, Detail: err.Error(), BuildID: buildID}
	var nd *NonDeterminismError
	var inv *InvalidDecisionError
	var pe *PanicError
	switch {
	case errors.As(err, &nd):
		f.Kind, f.Code = FailureNonDeterminism, nd.Code()
		f.Mismatch = &event.Mismatch{Kind: nd.Kind, ID: nd.ID, Field: nd.Field, Recorded: nd.Recorded, Produced: nd.New, Seq: nd.Seq}
	case errors.As(err, &inv):
		f.Kind, f.Code = FailureInvalidDecision, inv.Code
	case errors.As(err, &pe):
		f.Kind, f.Code = FailurePanic, CodePanic
		if loc := pe.Location(); loc != "" {
			f.Detail += " at " + loc
		}
	case errors.Is(err, ErrNotFound):
		f.Kind, f.Code = FailureUnknownDefinition, CodeNoDecision
	}
	return f
}

// SameFailure reports whether f is already the run's current Blocked diagnosis.
func (s *Snapshot) SameFailure(f *event.DecisionFailed) bool {
	b := s.Blocked
	return b != nil && b.Kind == f.Kind && b.Code == f.Code && b.Detail == f.Detail && b.BuildID == f.BuildID
}
