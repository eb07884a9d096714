package payload_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/pkg/event"
)

type memPuts map[string][]byte

func (m memPuts) Put(_ context.Context, data []byte) (payload.Ref, error) {
	r := payload.RefOf(data)
	m[r.SHA256] = data
	return r, nil
}

func TestRefShape(t *testing.T) {
	t.Parallel()
	r := payload.RefOf([]byte(`"hello"`))
	raw := r.JSON()
	require.Equal(t, `{"$flow.payload":"sha256:`+r.SHA256+`","size":7}`, string(raw))
	got, ok := payload.Parse(raw)
	require.True(t, ok)
	require.Equal(t, r, got)
	require.True(t, r.Matches([]byte(`"hello"`)))
	require.False(t, r.Matches([]byte(`"hellO"`)))

	for _, tc := range []struct {
		raw         string
		marked, ref bool
	}{
		{raw: ` { "$flow.payload" : "sha256:` + r.SHA256 + `", "size": 7}`, marked: true, ref: true},
		{raw: `{"$flow.payload":"sha256:abc","size":7}`, marked: true},                    // short hash
		{raw: `{"$flow.payload":"md5:` + r.SHA256 + `","size":7}`, marked: true},          // another algorithm
		{raw: `{"$flow.payload":"sha256:` + r.SHA256 + `"}`, marked: true},                // no size
		{raw: `{"$flow.payload":"sha256:` + r.SHA256 + `","size":7,"x":1}`, marked: true}, // more fields
		{raw: `{"$flow.payload":"sha256:` + strings.ToUpper(r.SHA256) + `","size":7}`, marked: true},
		{raw: `{"a":1,"$flow.payload":"sha256:` + r.SHA256 + `","size":7}`}, // not first
		{raw: `"{\"$flow.payload\":1}"`},
		{raw: `[1]`},
	} {
		require.Equal(t, tc.marked, payload.Marked([]byte(tc.raw)), tc.raw)
		require.Equal(t, tc.ref, payload.IsRef([]byte(tc.raw)), tc.raw)
	}
}

func TestEqualByHash(t *testing.T) {
	t.Parallel()
	a, b := []byte(`"`+strings.Repeat("a", 1000)+`"`), []byte(`"`+strings.Repeat("b", 1000)+`"`)
	ra := payload.RefOf(a).JSON()
	for _, tc := range []struct {
		rec, got         []byte
		equal, byPayload bool
	}{
		{ra, a, true, true}, {a, ra, true, true}, {ra, ra, true, true},
		{ra, b, false, true}, {ra, payload.RefOf(b).JSON(), false, true},
		{a, a, false, false},
	} {
		eq, handled := payload.Equal(tc.rec, tc.got)
		require.Equal(t, tc.byPayload, handled)
		if handled {
			require.Equal(t, tc.equal, eq)
		}
	}
}

// TestOffload: fields over the threshold, and small values that look like a reference, are
// stored and replaced by references in copies of the payloads; references are left alone.
func TestOffload(t *testing.T) {
	t.Parallel()
	big := json.RawMessage(`"` + strings.Repeat("x", 100) + `"`)
	lookalike := json.RawMessage(`{"$flow.payload":"mine"}`)
	ref := payload.RefOf([]byte(`"elsewhere"`)).JSON()
	sched := &event.StepScheduled{Steps: []event.StepSpec{{ID: "a", Input: big}, {ID: "b", Input: json.RawMessage(`1`)}}}
	sig := &event.SignalReceived{Name: "s", Payload: lookalike}
	done := &event.RunCompleted{Output: ref}
	small := &event.StepCompleted{StepID: "a", Output: json.RawMessage(`2`)}
	ps := []event.Payload{sched, sig, done, small}
	puts := memPuts{}
	require.NoError(t, payload.Offload(t.Context(), puts, 50, ps))

	require.NotSame(t, sched, ps[0])
	require.Equal(t, big, sched.Steps[0].Input, "the original is unchanged")
	got := ps[0].(*event.StepScheduled)
	require.Equal(t, payload.RefOf(big).JSON(), got.Steps[0].Input)
	require.Equal(t, json.RawMessage(`1`), got.Steps[1].Input)
	require.Equal(t, payload.RefOf(lookalike).JSON(), ps[1].(*event.SignalReceived).Payload, "a look-alike is always offloaded")
	require.Same(t, done, ps[2], "a reference is not offloaded again")
	require.Same(t, small, ps[3])
	require.Len(t, puts, 2)
	require.Equal(t, []byte(big), puts[payload.RefOf(big).SHA256])
}
