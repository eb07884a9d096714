package flow

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

var epoch = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// project returns the snapshot of run runID after payloads, run.started first.
func project(t *testing.T, runID string, payloads ...event.Payload) *core.Snapshot {
	t.Helper()
	hist := make([]event.Envelope, len(payloads))
	for i, p := range payloads {
		hist[i] = event.Envelope{RunID: runID, Seq: uint64(i + 1), Time: epoch.Add(time.Duration(i) * time.Second), Payload: p}
	}
	s, err := core.Project(runID, hist)
	require.NoError(t, err)
	return s
}

func started(seed string) *event.RunStarted {
	return &event.RunStarted{Spec: event.Spec{Definition: "order"}, Input: json.RawMessage(`{}`), Seed: seed}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestUUIDAndRandom(t *testing.T) {
	t.Parallel()
	draw := func(s *core.Snapshot) (uuids []string, randoms []uint64) {
		ctx := &Context{s: s}
		for range 3 {
			uuids = append(uuids, ctx.UUID())
			randoms = append(randoms, ctx.Random().Uint64())
		}
		return uuids, randoms
	}
	base := project(t, "order-1", started("seed-a"))
	u1, r1 := draw(base)
	for _, u := range u1 {
		require.Regexp(t, uuidV4, u)
	}
	require.NotEqual(t, u1[0], u1[1], "each call gives a new UUID")
	require.NotEqual(t, r1[0], r1[1], "each call gives a new stream")

	tests := []struct {
		name string
		s    *core.Snapshot
		same bool
	}{
		{"SameHistoryAgain", project(t, "order-1", started("seed-a")), true},
		{"LaterInTheSameRun", project(t, "order-1", started("seed-a"), &event.SignalReceived{Name: "go", Payload: json.RawMessage(`1`), DeliveryID: "d1"}), true},
		{"AnotherRun", project(t, "order-2", started("seed-a")), false},
		{"AnotherSeed", project(t, "order-1", started("seed-b")), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, r := draw(tt.s)
			if tt.same {
				require.Equal(t, u1, u)
				require.Equal(t, r1, r)
			} else {
				require.NotEqual(t, u1[0], u[0])
				require.NotEqual(t, r1[0], r[0])
			}
		})
	}

	t.Run("StreamsAreIndependent", func(t *testing.T) {
		t.Parallel()
		ctx := &Context{s: base}
		_ = ctx.Random() // drawing a generator does not move the UUIDs
		require.Equal(t, u1[0], ctx.UUID())
	})
}

func TestSideEffect(t *testing.T) {
	t.Parallel()
	recorded := project(t, "order-1", started("s"), &event.SideEffectRecorded{SideEffectID: "number", Value: json.RawMessage(`"ord-7"`)})
	fresh := project(t, "order-1", started("s"))
	tests := []struct {
		name      string
		s         *core.Snapshot
		query     bool
		fn        func() any
		wantValue string
		wantDec   core.Decision
		wantCalls int
	}{
		{name: "RecordedIsReadBack", s: recorded, fn: func() any { return "ord-other" }, wantValue: `"ord-7"`},
		{name: "FirstTimeRecords", s: fresh, fn: func() any { return map[string]int{"n": 7} },
			wantDec: core.RecordSideEffect{ID: "number", Value: json.RawMessage(`{"n":7}`)}, wantCalls: 1},
		{name: "QueryModeRunsNothing", s: fresh, query: true, fn: func() any { return 1 },
			wantDec: core.RecordSideEffect{ID: "number", Value: json.RawMessage(`null`)}},
		{name: "NilFunction", s: fresh, wantDec: core.Invalid{}},
		{name: "UnencodableValue", s: fresh, fn: func() any { return func() {} }, wantDec: core.Invalid{}, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := &Context{s: tt.s}
			if tt.query {
				ctx.query = &queryEval{handlers: map[string]queryFunc{}}
			}
			calls := 0
			var fn func() any
			if tt.fn != nil {
				fn = func() any { calls++; return tt.fn() }
			}
			v, d := ctx.SideEffect("number", fn)
			require.Equal(t, tt.wantCalls, calls)
			if tt.wantValue != "" {
				require.JSONEq(t, tt.wantValue, string(v))
			}
			switch want := tt.wantDec.(type) {
			case nil:
				require.Nil(t, d)
			case core.Invalid:
				require.IsType(t, core.Invalid{}, d)
			default:
				require.Equal(t, want, d)
			}
		})
	}

	t.Run("Typed", func(t *testing.T) {
		t.Parallel()
		n, d, err := SideEffectValue(&Context{s: recorded}, "number", func() string { return "x" })
		require.NoError(t, err)
		require.Nil(t, d)
		require.Equal(t, "ord-7", n)
		_, _, err = SideEffectValue(&Context{s: recorded}, "number", func() int { return 1 })
		require.ErrorContains(t, err, `decoding the value of side effect "number" into int`)
	})
}
