package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// uiEvent is one row of a run's timeline.
type uiEvent struct {
	Seq  uint64
	Time time.Time
	// Offset is the time since the run started.
	Offset time.Duration
	Type   event.Type
	// Class groups types for colour: run, step, wait, signal, hook, child, fail, end.
	Class   string
	Summary string
	// JSON is the whole envelope, indented.
	JSON string
	// Current marks the event the snapshot is at; Future those after it.
	Current, Future bool
}

// uiInline bounds the JSON values a summary shows inline.
const uiInline = 90

// describe renders e for the timeline; started is the run's start time.
func describe(e event.Envelope, started time.Time) uiEvent {
	ev := uiEvent{Seq: e.Seq, Time: e.Time, Offset: e.Time.Sub(started), Type: e.Type(), Class: typeClass(e.Type()),
		Summary: summarize(e.Payload)}
	if b, err := json.MarshalIndent(e, "", "  "); err == nil {
		ev.JSON = string(b)
	}
	return ev
}

func typeClass(t event.Type) string {
	switch t {
	case event.TypeStepFailed, event.TypeDecisionFailed, event.TypeRunFailed:
		return "fail"
	case event.TypeRunCompleted, event.TypeRunCancelled, event.TypeRunContinuedAsNew:
		return "end"
	case event.TypeRunStarted, event.TypeRunCancelRequested, event.TypeRunAdmitted, event.TypeRunReset:
		return "run"
	}
	kind, _, _ := strings.Cut(string(t), ".")
	return kind
}

// summarize renders a payload in one line.
func summarize(p event.Payload) string {
	switch p := p.(type) {
	case *event.RunStarted:
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
			s += ", attributes " + attrPairs(p.Attributes)
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
		return s + startPolicySummary(p) + scheduleSummary(p)
	case *event.RunAdmitted:
		s := "admitted by flow control, group " + p.Group
		if p.Key != "" {
			s += fmt.Sprintf(", key %q", p.Key)
		}
		return s + fmt.Sprintf(", after %s queued", time.Duration(p.Queued))
	case *event.StepScheduled:
		parts := make([]string, len(p.Steps))
		for i, st := range p.Steps {
			parts[i] = fmt.Sprintf("%s (%s) %s", st.ID, st.Name, inline(st.Input))
		}
		return "schedule " + strings.Join(parts, "; ")
	case *event.StepCompleted:
		return fmt.Sprintf("%s completed, attempt %d → %s", p.StepID, p.Attempt, inline(p.Output))
	case *event.StepFailed:
		s := fmt.Sprintf("%s attempt %d failed: %s", p.StepID, p.Attempt, p.Error.Error())
		if p.Final {
			s += " (final)"
		} else if p.Retryable {
			s += " (will retry)"
		}
		return s
	case *event.StepRetryScheduled:
		return fmt.Sprintf("%s attempt %d due %s", p.StepID, p.Attempt, p.Due.Format("15:04:05.000"))
	case *event.StepRetryFired:
		return fmt.Sprintf("%s attempt %d in flight", p.StepID, p.Attempt)
	case *event.StepCancelled:
		ids := make([]string, len(p.Steps))
		for i, st := range p.Steps {
			ids[i] = st.StepID
			if st.SideEffectUnknown {
				ids[i] += " (side effect unknown)"
			}
		}
		return fmt.Sprintf("cancelled %s: %s (%s)", strings.Join(ids, ", "), p.Reason, p.Cause)
	case *event.WaitScheduled:
		s := fmt.Sprintf("timer %s until %s", p.WaitID, p.Deadline.Format("2006-01-02 15:04:05.000"))
		if p.Duration != 0 {
			s += fmt.Sprintf(" (%s)", time.Duration(p.Duration))
		}
		return s
	case *event.WaitFired:
		return fmt.Sprintf("timer %s fired", p.WaitID)
	case *event.SignalAwaited:
		return fmt.Sprintf("await signal %q as %s", p.Name, p.WaitID)
	case *event.SignalReceived:
		return fmt.Sprintf("signal %q received %s", p.Name, inline(p.Payload))
	case *event.HookCreated:
		return fmt.Sprintf("hook %s created, token %s", p.HookID, p.Token)
	case *event.HookReceived:
		return fmt.Sprintf("hook %s received %s", p.HookID, inline(p.Payload))
	case *event.ChildScheduled:
		parts := make([]string, len(p.Children))
		for i, c := range p.Children {
			parts[i] = fmt.Sprintf("%s (%s) as run %s", c.ChildID, c.Definition, c.RunID)
		}
		return "start child " + strings.Join(parts, "; ")
	case *event.ChildSettled:
		s := fmt.Sprintf("child %s %s", p.ChildID, p.Outcome)
		switch {
		case p.Error != nil:
			s += ": " + p.Error.Error()
		case len(p.Output) > 0:
			s += " → " + inline(p.Output)
		}
		return s
	case *event.RunCancelRequested:
		return "cancel requested: " + orNone(p.Reason)
	case *event.DecisionFailed:
		return fmt.Sprintf("decision failed [%s] %s: %s", p.Code, p.Kind, clip(p.Detail, 160))
	case *event.RunCompleted:
		return "completed → " + inline(p.Output)
	case *event.RunFailed:
		return fmt.Sprintf("failed: %s (%s)", p.Error.Error(), p.Cause)
	case *event.RunCancelled:
		return fmt.Sprintf("cancelled: %s (%s)", orNone(p.Reason), p.Cause)
	case *event.RunContinuedAsNew:
		return fmt.Sprintf("continued as new as run %s, input %s", p.SuccessorRunID, inline(p.Input))
	case *event.RunReset:
		s := fmt.Sprintf("reset as run %s from seq %d (%s)", p.NewRunID, p.Seq, p.Mode)
		if p.Terminated {
			s += ", ending this run"
		}
		return s
	case *event.SideEffectRecorded:
		return fmt.Sprintf("side effect %s recorded → %s", p.SideEffectID, inline(p.Value))
	case *event.AttributesUpserted:
		return fmt.Sprintf("upsert %s: %s", p.UpsertID, attrPairs(p.Attributes))
	case *event.UpdateReceived:
		return fmt.Sprintf("update %q (%s) received %s", p.Name, p.UpdateID, inline(p.Payload))
	case *event.UpdateAccepted:
		return fmt.Sprintf("update %s accepted", p.UpdateID)
	case *event.UpdateRejected:
		return fmt.Sprintf("update %s rejected: %s", p.UpdateID, p.Error.Error())
	case *event.UpdateCompleted:
		if p.Error != nil {
			return fmt.Sprintf("update %s failed: %s", p.UpdateID, p.Error.Error())
		}
		return fmt.Sprintf("update %s completed → %s", p.UpdateID, inline(p.Result))
	case *event.RunDelayFired, *event.RunDebounced:
		return summarizeDelay(p)
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "(no reason)"
	}
	return s
}

// inline renders a JSON value compactly, clipped.
func inline(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return clip(string(raw), uiInline)
	}
	return clip(b.String(), uiInline)
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
