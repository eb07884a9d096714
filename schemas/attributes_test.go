package schemas_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
)

// exampleAttributes has one search attribute of every type.
func exampleAttributes() event.Attributes {
	must := func(t event.AttributeType, v any) event.AttributeValue {
		a, err := event.NewAttribute(t, v)
		if err != nil {
			panic(err)
		}
		return a
	}
	return event.Attributes{
		"customer": must(event.AttrKeyword, "c-42"),
		"note":     must(event.AttrText, "rush delivery"),
		"amount":   must(event.AttrInt, 120),
		"score":    must(event.AttrFloat, 0.75),
		"vip":      must(event.AttrBool, true),
		"due":      must(event.AttrTime, time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)),
		"tags":     must(event.AttrKeywordList, []string{"eu", "priority"}),
	}
}

// TestInvalidAttributes: a malformed search attribute is refused by the schema and by Go alike.
func TestInvalidAttributes(t *testing.T) {
	t.Parallel()
	c := compile(t)
	upsert := &event.AttributesUpserted{UpsertID: "stage-paid", Attributes: exampleAttributes()}
	attrs := func(m map[string]any) map[string]any { return m["attributes"].(map[string]any) }
	for _, tc := range []struct {
		name string
		f    func(m map[string]any)
	}{
		{"NoUpsertID", func(m map[string]any) { m["upsert_id"] = "" }},
		{"NoAttributes", func(m map[string]any) { m["attributes"] = map[string]any{} }},
		{"UnknownType", func(m map[string]any) { attrs(m)["customer"] = map[string]any{"type": "uuid", "value": "x"} }},
		{"IntAsString", func(m map[string]any) { attrs(m)["amount"] = map[string]any{"type": "int", "value": "120"} }},
		{"IntWithFraction", func(m map[string]any) { attrs(m)["amount"] = map[string]any{"type": "int", "value": 1.5} }},
		{"KeywordAsNumber", func(m map[string]any) { attrs(m)["customer"] = map[string]any{"type": "keyword", "value": 42} }},
		{"EmptyKeyword", func(m map[string]any) { attrs(m)["customer"] = map[string]any{"type": "keyword", "value": ""} }},
		{"BoolAsString", func(m map[string]any) { attrs(m)["vip"] = map[string]any{"type": "bool", "value": "yes"} }},
		{"ProseTime", func(m map[string]any) { attrs(m)["due"] = map[string]any{"type": "time", "value": "christmas"} }},
		{"ListOfNumbers", func(m map[string]any) {
			attrs(m)["tags"] = map[string]any{"type": "keyword_list", "value": []any{1, 2}}
		}},
		{"NoValue", func(m map[string]any) { attrs(m)["vip"] = map[string]any{"type": "bool"} }},
		{"ReservedName", func(m map[string]any) { attrs(m)["status"] = map[string]any{"type": "keyword", "value": "x"} }},
		{"BadName", func(m map[string]any) { attrs(m)["9lives"] = map[string]any{"type": "bool", "value": true} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := mutate(t, upsert, tc.f)
			require.Error(t, validate(t, c.payloads[event.TypeAttributesUpserted], data), "schema accepts %s", data)
			_, err := event.DecodePayload(event.TypeAttributesUpserted, data)
			require.Error(t, err, "Go accepts %s", data)
		})
	}
	// The same rules hold for run.started's attributes.
	started := &event.RunStarted{Spec: event.Spec{Definition: "order"}, Input: json.RawMessage(`null`), Seed: "s",
		Attributes: event.Attributes{"amount": {Type: event.AttrInt, Value: json.RawMessage(`"many"`)}}}
	b, err := json.Marshal(started)
	require.NoError(t, err)
	require.Error(t, validate(t, c.payloads[event.TypeRunStarted], b))
	_, err = event.DecodePayload(event.TypeRunStarted, b)
	require.Error(t, err)
}
