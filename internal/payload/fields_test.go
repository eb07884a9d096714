package payload_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/pkg/event"
)

// notPayloads are the JSON fields of events that are not payloads: never offloaded, so never a
// reference. Anything else of type json.RawMessage in an event must be a payload field.
var notPayloads = []string{
	"RunDeleted.Summary", // the run's index summary, small and Flow's own
	// Search attributes: typed scalars, bounded in size.
	"AttributesUpserted.Attributes[].Value",
	"RunStarted.Attributes[].Value",
}

// rawFields sets every json.RawMessage field reachable in v (structs, pointers to them, slices
// and maps of them) to a distinct reference, and returns each field's path and reference.
func rawFields(v reflect.Value, path string, depth int, out map[string]payload.Ref) {
	if depth > 6 {
		return
	}
	rawType := reflect.TypeFor[json.RawMessage]()
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		rawFields(v.Elem(), path, depth+1, out)
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			fv := v.Field(i)
			p := path + "." + f.Name
			if f.Type == rawType {
				r := payload.RefOf([]byte(`"` + p + `"`))
				fv.Set(reflect.ValueOf(json.RawMessage(r.JSON())))
				out[p] = r
				continue
			}
			rawFields(fv, p, depth+1, out)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		rawFields(s.Index(0), path+"[]", depth+1, out)
		v.Set(s)
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return
		}
		e := reflect.New(v.Type().Elem()).Elem()
		rawFields(e, path+"[]", depth+1, out)
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(reflect.ValueOf("k").Convert(v.Type().Key()), e)
		v.Set(m)
	}
}

// TestFieldsCoverEveryPayload: every JSON field of every event type is either visited by the
// payload visitor (and so offloaded, archived with a deleted run, and kept alive by the payload
// collector) or listed in notPayloads. A new event field of type json.RawMessage fails here
// until it is added to one of them.
func TestFieldsCoverEveryPayload(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, typ := range event.Types() {
		p := event.New(typ)
		all := map[string]payload.Ref{}
		name := reflect.TypeOf(p).Elem().Name()
		rawFields(reflect.ValueOf(p).Elem(), name, 0, all)
		var visited []payload.Ref
		payload.Refs(p, func(r payload.Ref) { visited = append(visited, r) })
		for path, r := range all {
			seen[path] = true
			if slices.Contains(notPayloads, path) {
				require.NotContains(t, visited, r, "%s is listed as not a payload, but the visitor visits it", path)
				continue
			}
			require.Contains(t, visited, r, "%s (event %s) is JSON but not a payload field: declare it in its type's PayloadFields (pkg/event), or add it to notPayloads if it is never offloaded", path, typ)
		}
		require.LessOrEqual(t, len(visited), len(all), "%s: the visitor visits fields the event does not have", typ)
	}
	for _, p := range notPayloads {
		require.True(t, seen[p], "%s is no event's field any more: drop it from notPayloads", p)
	}
}

// TestOffloadCopies: offloading changes a copy of an event, never the event itself, and leaves
// alone what need not be offloaded.
func TestOffloadCopies(t *testing.T) {
	t.Parallel()
	big := json.RawMessage(`"` + strings.Repeat("x", 100) + `"`)
	small := json.RawMessage(`1`)
	orig := &event.StepScheduled{Steps: []event.StepSpec{{ID: "a", Input: big}, {ID: "b", Input: small}}}
	ps := []event.Payload{orig, &event.WaitFired{WaitID: "w"}}
	puts := memPuts{}
	require.NoError(t, payload.Offload(t.Context(), puts, 10, ps))
	require.Equal(t, string(big), string(orig.Steps[0].Input), "the original is unchanged")
	got := ps[0].(*event.StepScheduled)
	require.NotSame(t, orig, got)
	require.Equal(t, string(payload.RefOf(big).JSON()), string(got.Steps[0].Input))
	require.Equal(t, string(small), string(got.Steps[1].Input))
	require.Len(t, puts, 1)
	require.Equal(t, []payload.Ref{payload.RefOf(big)}, payload.HistoryRefs([]event.Envelope{{Payload: got}, {Payload: got}}))
}

// TestHashesIn: the hashes of a commit's references, read from its events' payload fields, or
// found in its text when it does not decode.
func TestHashesIn(t *testing.T) {
	t.Parallel()
	a, b := payload.RefOf([]byte(`"a"`)), payload.RefOf([]byte(`"b"`))
	envs := []event.Envelope{
		{RunID: "r", Seq: 1, Payload: &event.RunStarted{Spec: event.Spec{Definition: "d"}, Input: a.JSON(), Seed: "0123456789abcdef"}},
		{RunID: "r", Seq: 2, Payload: &event.RunCompleted{Output: b.JSON()}},
	}
	body, err := event.MarshalEnvelopes(envs)
	require.NoError(t, err)
	collect := func(data []byte) []string {
		var got []string
		payload.HashesIn(data, func(h string) { got = append(got, h) })
		return got
	}
	require.Equal(t, []string{a.SHA256, b.SHA256}, collect(body))
	require.Empty(t, collect([]byte(`[{"run_id":"r","seq":1,"type":"wait.fired","data":{"wait_id":"w"}}]`)))
	// A body that does not decode, and an event of an unknown type, are searched as text.
	require.Equal(t, []string{a.SHA256}, collect(append([]byte(`not json `), a.JSON()...)))
	unknown := `[{"run_id":"r","seq":1,"time":"2026-01-01T00:00:00Z","type":"x.future","data":{"deep":{"v":` + string(b.JSON()) + `}}}]`
	require.Equal(t, []string{b.SHA256}, collect([]byte(unknown)))
}
