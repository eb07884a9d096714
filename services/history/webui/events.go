package webui

import (
	"bytes"
	"encoding/json"
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

// describe renders e for the timeline; started is the run's start time.
func describe(e event.Envelope, started time.Time) uiEvent {
	ev := uiEvent{Seq: e.Seq, Time: e.Time, Offset: e.Time.Sub(started), Type: e.Type(), Class: typeClass(e.Type()),
		Summary: event.Summarize(e.Payload)}
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

// uiInline bounds the JSON values the templates show inline.
const uiInline = 90

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
