package event_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
)

// undeclared returns the types of types whose payload (made by newPayload) does not declare
// its payload fields and its summary (event.Described), in order.
func undeclared(types []event.Type, newPayload func(event.Type) event.Payload) []event.Type {
	var out []event.Type
	for _, typ := range types {
		if _, ok := newPayload(typ).(event.Described); !ok {
			out = append(out, typ)
		}
	}
	return out
}

// bare is a payload that declares nothing but Payload: what a new event type looks like before
// it joins the catalogue properly.
type bare struct{}

func (*bare) EventType() event.Type { return "x.bare" }
func (*bare) Validate() error       { return nil }

// TestCatalogueDeclares: every catalogued event type declares its payload fields and its
// one-line summary next to its payload type, so that offload, payload resolution and the web
// UI need not know it; a type that does not fails here.
func TestCatalogueDeclares(t *testing.T) {
	t.Parallel()
	require.Empty(t, undeclared(event.Types(), event.New), "these event types do not implement event.Described")
	for _, typ := range event.Types() {
		p := event.New(typ)
		require.Equal(t, typ, p.EventType())
		require.NotEmpty(t, event.Summarize(p), "%s: the summary of a zero payload is empty", typ)
		for _, f := range event.PayloadFields(p) {
			require.NotNil(t, f, "%s: a payload field is nil", typ)
		}
	}

	// A new type without them is caught.
	withNew := append(event.Types(), "x.bare")
	newPayload := func(typ event.Type) event.Payload {
		if typ == "x.bare" {
			return &bare{}
		}
		return event.New(typ)
	}
	require.Equal(t, []event.Type{"x.bare"}, undeclared(withNew, newPayload))
	require.Nil(t, event.PayloadFields(&bare{}))
	require.Empty(t, event.Summarize(&bare{}))
}

// TestPayloadFieldsAddress: the payload fields are the payload's own, in order, and a copy's
// are the copy's.
func TestPayloadFieldsAddress(t *testing.T) {
	t.Parallel()
	p := &event.StepScheduled{Steps: []event.StepSpec{{ID: "a", Input: json.RawMessage(`1`)}, {ID: "b", Input: json.RawMessage(`2`)}}}
	fields := event.PayloadFields(p)
	require.Len(t, fields, 2)
	require.Same(t, &p.Steps[0].Input, fields[0])
	require.Same(t, &p.Steps[1].Input, fields[1])

	c := event.CopyPayload(p).(*event.StepScheduled)
	require.NotSame(t, p, c)
	*event.PayloadFields(c)[1] = json.RawMessage(`3`)
	require.JSONEq(t, `2`, string(p.Steps[1].Input), "setting a copy's field leaves the original alone")
	require.JSONEq(t, `3`, string(c.Steps[1].Input))
}

// TestSummaries: a few summaries as the web UI's timeline shows them.
func TestSummaries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    event.Payload
		want string
	}{
		{&event.StepCompleted{StepID: "charge", Attempt: 2, Output: json.RawMessage(`{ "ok": true }`)}, `charge completed, attempt 2 → {"ok":true}`},
		{&event.RunCancelRequested{}, "cancel requested: (no reason)"},
		{&event.AttributesUpserted{UpsertID: "u1", Attributes: event.Attributes{"b": {Type: event.AttrInt, Value: json.RawMessage(`2`)}, "a": {Type: event.AttrKeyword, Value: json.RawMessage(`"x"`)}}}, `upsert u1: a="x" b=2`},
		{&event.RunPaused{Cause: event.PauseOperator, Reason: "deploy", By: "ops"}, "paused (operator): deploy, by ops"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, event.Summarize(tt.p), "%s", tt.p.EventType())
	}
}
