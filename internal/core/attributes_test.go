package core_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

func attr(t testing.TB, typ event.AttributeType, v any) event.AttributeValue {
	t.Helper()
	a, err := event.NewAttribute(typ, v)
	require.NoError(t, err)
	return a
}

var attrDecls = []event.AttributeDecl{{Name: "amount", Type: event.AttrInt}, {Name: "customer", Type: event.AttrKeyword},
	{Name: "tags", Type: event.AttrKeywordList}}

// TestUpsertAttributes covers the life of an upsert: recorded, merged into the snapshot and the
// summary, compared on replay attribute by attribute, refused once recorded, and checked against
// the declarations.
func TestUpsertAttributes(t *testing.T) {
	t.Parallel()
	c42 := event.Attributes{"customer": attr(t, event.AttrKeyword, "c-42")}
	started := func(t *testing.T) *history {
		h := newHistory(t, "r", event.Spec{})
		h.envs[0].Payload.(*event.RunStarted).Attributes = event.Attributes{"amount": attr(t, event.AttrInt, 10)}
		return h
	}
	upserted := func(t *testing.T) *history {
		return started(t).add(&event.AttributesUpserted{UpsertID: "set-customer", Attributes: c42})
	}

	t.Run("a new upsert is recorded and merged", func(t *testing.T) {
		h := started(t)
		v, err := core.Validate(h.snapshot(), core.UpsertAttributes{ID: "set-customer", Attributes: c42})
		require.NoError(t, err)
		require.Len(t, v.Events, 1)
		require.Equal(t, &event.AttributesUpserted{UpsertID: "set-customer", Attributes: c42}, v.Events[0])
		h.add(v.Events[0])
		s := h.snapshot()
		require.Equal(t, event.Attributes{"amount": attr(t, event.AttrInt, 10), "customer": attr(t, event.AttrKeyword, "c-42")}, s.Attributes)
		sum := s.Summary()
		require.Equal(t, uint64(2), sum.Seq, "an upsert changes the summary")
		require.True(t, sum.Attributes.Equal(s.Attributes))
	})

	t.Run("a later upsert replaces a value", func(t *testing.T) {
		h := upserted(t).add(&event.AttributesUpserted{UpsertID: "raise", Attributes: event.Attributes{"amount": attr(t, event.AttrInt, 99)}})
		got, _ := h.snapshot().Attributes["amount"].Int()
		require.Equal(t, int64(99), got)
	})

	t.Run("re-issuing a recorded upsert is already settled", func(t *testing.T) {
		_, err := core.Validate(upserted(t).snapshot(), core.UpsertAttributes{ID: "set-customer", Attributes: c42})
		var inv *core.InvalidDecisionError
		require.ErrorAs(t, err, &inv)
		require.Equal(t, core.CodeAlreadySettled, inv.Code)
		require.Contains(t, inv.Detail, "ctx.Upserted")
	})

	nd := []struct {
		name      string
		check     func(h *history) error
		wantField string
		wantRec   string
		wantNew   string
	}{
		{"a changed value, live", validate(core.UpsertAttributes{ID: "set-customer", Attributes: event.Attributes{"customer": attr(t, event.AttrKeyword, "c-43")}}),
			"attributes.customer", `keyword "c-42"`, `keyword "c-43"`},
		{"a changed value, on replay", replayWith(declared(core.UpsertAttributes{ID: "set-customer", Attributes: event.Attributes{"customer": attr(t, event.AttrKeyword, "c-43")}})),
			"attributes.customer", `keyword "c-42"`, `keyword "c-43"`},
		{"an added attribute, on replay", replayWith(declared(core.UpsertAttributes{ID: "set-customer", Attributes: event.Attributes{"customer": attr(t, event.AttrKeyword, "c-42"), "amount": attr(t, event.AttrInt, 1)}})),
			"attributes.amount", "not set", "int 1"},
		{"another upsert ID, on replay", replayWith(declared(core.UpsertAttributes{ID: "set-client", Attributes: c42})),
			"upsert_id", `"set-customer"`, `"set-client"`},
	}
	for _, tc := range nd {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.check(upserted(t))
			var e *core.NonDeterminismError
			require.ErrorAs(t, err, &e)
			require.True(t, errors.Is(err, core.ErrNonDeterminism))
			require.Equal(t, "upsert", e.Kind)
			require.Equal(t, "set-customer", e.ID)
			require.Equal(t, tc.wantField, e.Field)
			require.Equal(t, tc.wantRec, e.Recorded)
			require.Equal(t, tc.wantNew, e.New)
			require.Equal(t, uint64(2), e.Seq)
		})
	}

	t.Run("replay of the same upsert passes", func(t *testing.T) {
		h := upserted(t).add(&event.RunCompleted{Output: []byte("null")})
		d := script{id: core.Identity{Attributes: attrDecls}, fn: func(s *core.Snapshot) core.Decision {
			if _, ok := s.Upserts["set-customer"]; !ok {
				return core.UpsertAttributes{ID: "set-customer", Attributes: c42}
			}
			return core.Complete{}
		}}
		_, err := core.Replay(h.run, h.envs, d, core.DecideOptions{})
		require.NoError(t, err)
	})

	invalid := []struct {
		name  string
		dec   core.UpsertAttributes
		decls []event.AttributeDecl
		want  string
	}{
		{"undeclared", core.UpsertAttributes{ID: "u", Attributes: event.Attributes{"region": attr(t, event.AttrKeyword, "eu")}}, attrDecls,
			`sets search attribute "region", which the workflow does not declare (declared: amount (int), customer (keyword), tags (keyword_list))`},
		{"wrong type", core.UpsertAttributes{ID: "u", Attributes: event.Attributes{"amount": attr(t, event.AttrFloat, 1.5)}}, attrDecls,
			`sets search attribute "amount" to a float value, but it is declared int`},
		{"nothing declared", core.UpsertAttributes{ID: "u", Attributes: c42}, nil, "(declared: none)"},
		{"no attributes", core.UpsertAttributes{ID: "u"}, attrDecls, "sets no attribute"},
		{"bad ID", core.UpsertAttributes{ID: "1u", Attributes: c42}, attrDecls, "must start with a letter"},
		{"malformed value", core.UpsertAttributes{ID: "u", Attributes: event.Attributes{"customer": {Type: event.AttrKeyword, Value: []byte(`42`)}}}, attrDecls,
			"a keyword attribute takes a string"},
		{"ID of a step", core.UpsertAttributes{ID: "charge", Attributes: c42}, attrDecls, `ID "charge" was recorded for a step at seq 2`},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			h := started(t).add(scheduled(stepSpec("charge", "chargeCard", `1`)))
			_, err := core.Decide(h.snapshot(), script{id: core.Identity{Attributes: tc.decls}, fn: func(*core.Snapshot) core.Decision { return tc.dec }}, core.DecideOptions{})
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}

	t.Run("a repeated upsert ID breaks the history", func(t *testing.T) {
		h := upserted(t)
		h.add(&event.AttributesUpserted{UpsertID: "set-customer", Attributes: c42})
		vs := core.Check(h.run, h.envs)
		require.Len(t, vs, 1)
		require.Equal(t, "duplicate_id", vs[0].Rule)
	})
}

// TestTypeAttributes types a start's raw attributes by the declarations.
func TestTypeAttributes(t *testing.T) {
	t.Parallel()
	got, err := core.TypeAttributes(map[string][]byte{"amount": []byte(`"42"`), "customer": []byte(`"c-42"`), "tags": []byte(`"a, b"`)}, attrDecls)
	require.NoError(t, err)
	require.Equal(t, event.Attributes{"amount": attr(t, event.AttrInt, 42), "customer": attr(t, event.AttrKeyword, "c-42"),
		"tags": attr(t, event.AttrKeywordList, []string{"a", "b"})}, got)
	_, err = core.TypeAttributes(map[string][]byte{"amount": []byte(`"many"`)}, attrDecls)
	require.ErrorIs(t, err, core.ErrInvalidInput)
	require.ErrorContains(t, err, `search attribute "amount"`)
	require.ErrorContains(t, err, "an int attribute takes an integer")
	_, err = core.TypeAttributes(map[string][]byte{"region": []byte(`"eu"`)}, attrDecls)
	require.ErrorContains(t, err, `"region" is not declared`)
}

// declared is always(dec) for code that declares attrDecls.
func declared(dec core.Decision) script {
	return script{id: core.Identity{Attributes: attrDecls}, fn: func(*core.Snapshot) core.Decision { return dec }}
}

// TestSummaryEqualCoversEveryField: changing any one field of a summary makes it unequal, so
// that a field added to Summary cannot be forgotten by Equal (the runs index skips a write
// when the entry is Equal to the summary it would write).
func TestSummaryEqualCoversEveryField(t *testing.T) {
	t.Parallel()
	base := core.Summary{StartedAt: epoch, UpdatedAt: epoch}
	require.True(t, base.Equal(base))
	typ := reflect.TypeFor[core.Summary]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		changed := base
		v := reflect.ValueOf(&changed).Elem().Field(i)
		switch {
		case f.Type == reflect.TypeFor[time.Time]():
			v.Set(reflect.ValueOf(epoch.Add(time.Second)))
		case f.Type == reflect.TypeFor[event.Attributes]():
			v.Set(reflect.ValueOf(event.Attributes{"amount": attr(t, event.AttrInt, 1)}))
		case v.Kind() == reflect.String:
			v.SetString("changed")
		case v.CanUint():
			v.SetUint(7)
		case v.CanInt():
			v.SetInt(7)
		case v.Kind() == reflect.Bool:
			v.SetBool(true)
		case v.Kind() == reflect.Pointer:
			v.Set(reflect.New(f.Type.Elem()))
		default:
			t.Fatalf("Summary.%s has type %s, which this test cannot change: extend it, and Summary.Equal", f.Name, f.Type)
		}
		require.False(t, base.Equal(changed), "Summary.Equal ignores field %s", f.Name)
		require.False(t, changed.Equal(base), "Summary.Equal ignores field %s", f.Name)
	}
}
