package filter_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/filter"
	"github.com/flowrun/flow/pkg/event"
)

var schema = filter.NewSchema("", filter.Declared{Definition: "order", Attributes: []event.AttributeDecl{
	{Name: "customer", Type: event.AttrKeyword}, {Name: "note", Type: event.AttrText}, {Name: "amount", Type: event.AttrInt},
	{Name: "score", Type: event.AttrFloat}, {Name: "vip", Type: event.AttrBool}, {Name: "due", Type: event.AttrTime},
	{Name: "tags", Type: event.AttrKeywordList},
}})

func val(t testing.TB, typ event.AttributeType, v any) event.AttributeValue {
	t.Helper()
	a, err := event.NewAttribute(typ, v)
	require.NoError(t, err)
	return a
}

// run is a summary with every attribute set.
func run(t testing.TB) core.Summary {
	return core.Summary{RunID: "order-1", Definition: "order", Status: core.StatusRunning, Seq: 4,
		StartedAt: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC), UpdatedAt: time.Date(2026, 12, 2, 9, 5, 0, 0, time.UTC),
		Detail: "Waiting for the Payment",
		Attributes: event.Attributes{
			"customer": val(t, event.AttrKeyword, "c-42"), "note": val(t, event.AttrText, "Rush delivery, fragile"),
			"amount": val(t, event.AttrInt, 120), "score": val(t, event.AttrFloat, 0.75), "vip": val(t, event.AttrBool, true),
			"due":  val(t, event.AttrTime, time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)),
			"tags": val(t, event.AttrKeywordList, []string{"eu", "priority"}),
		}}
}

// TestMatch is the evaluator's table: every operator on every type, over one run.
func TestMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		want bool
	}{
		{`customer = "c-42"`, true},
		{`customer = "c-43"`, false},
		{`customer != "c-43"`, true},
		{`customer < "c-5"`, true},
		{`customer in ("c-1", "c-42")`, true},
		{`customer not in ("c-1", "c-42")`, false},
		{`note = "Rush delivery, fragile"`, true},
		{`note contains "FRAGILE"`, true},
		{`note contains "glass"`, false},
		{`amount = 120`, true},
		{`amount > 100 and amount <= 120`, true},
		{`amount >= 121`, false},
		{`amount in (1, 2, 120)`, true},
		{`amount < -5`, false},
		{`score > 0.5`, true},
		{`score < 1`, true},
		{`score = 0.75`, true},
		{`score >= 7.5e-1`, true},
		{`vip = true`, true},
		{`vip != true`, false},
		{`vip = false`, false},
		{`due > "2026-12-24"`, true},
		{`due < "2026-12-24T18:00:00Z"`, false},
		{`due = "2026-12-24T19:00:00+01:00"`, true},
		{`tags contains "eu"`, true},
		{`tags contains "us"`, false},
		{`status = "running"`, true},
		{`status in ("completed", "failed")`, false},
		{`definition = "order" and run_id = "order-1"`, true},
		{`queue = "default"`, true},
		{`build = ""`, true},
		{`parent = ""`, true},
		{`started > "2026-12-01"`, true},
		{`started >= "2026-12-02T09:00:00Z" and updated < "2026-12-02T09:05:01Z"`, true},
		{`detail contains "payment"`, true},
		{`customer = "c-42" and status = "running" and started > "2026-12-01"`, true},
		{`customer = "x" or amount = 120`, true},
		{`customer = "x" or amount = 1`, false},
		{`not customer = "x"`, true},
		{`not (customer = "c-42" and vip = true)`, false},
		{`(customer = "x" or vip = true) and tags contains "priority"`, true},
		{`customer = "x" or vip = true and amount = 1`, false}, // and binds tighter than or
		{`NOT (customer = "x") AND vip = TRUE`, true},          // keywords are case-insensitive; names are not, see TestCompileErrors
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			f, err := filter.Compile(tc.src, schema)
			require.NoError(t, err)
			require.Equal(t, tc.want, f.Match(run(t)))
		})
	}
}

// TestMatchMissing: a run without an attribute matches no comparison on it, != included, and
// "not" of one.
func TestMatchMissing(t *testing.T) {
	t.Parallel()
	bare := core.Summary{RunID: "r", Definition: "order", Status: core.StatusCompleted, Queue: "fast"}
	for src, want := range map[string]bool{
		`customer = "c-42"`:        false,
		`customer != "c-42"`:       false,
		`customer not in ("a")`:    false,
		`tags contains "eu"`:       false,
		`not (customer = "c-42")`:  true,
		`queue = "fast"`:           true,
		`status = "completed"`:     true,
		`amount > 0 or vip = true`: false,
	} {
		f, err := filter.Compile(src, schema)
		require.NoError(t, err, src)
		require.Equal(t, want, f.Match(bare), src)
	}
	var none *filter.Filter
	require.True(t, none.Match(bare), "a nil filter matches every run")
	f, err := filter.Compile("  ", schema)
	require.NoError(t, err)
	require.Nil(t, f, "a blank filter is no filter")
}

// TestCompileErrors is the table of the parser's and the type checker's errors: each names the
// problem and what to write instead.
func TestCompileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		col  int
		want []string
	}{
		// unknown names, with the known ones listed
		{`not Customer = "x"`, 5, []string{`unknown attribute "Customer"`}},
		{`custmer = "c-42"`, 1, []string{`unknown attribute "custmer"`, "known: run_id (keyword)", "customer (keyword)", "tags (keyword_list)"}},
		// type mismatches: the attribute's type and the literal to use
		{`amount = "120"`, 10, []string{`amount is an int, and string "120" is not one`, "use an integer literal, e.g. 42"}},
		{`amount = 1.5`, 10, []string{"amount is an int, and 1.5 is not an integer"}},
		{`customer = 42`, 12, []string{"customer is a keyword, and number 42 is not one", "use a quoted string"}},
		{`score = true`, 9, []string{"score is a float", "use a number literal"}},
		{`vip = "yes"`, 7, []string{"vip is a bool", "use true or false"}},
		{`vip > true`, 5, []string{"vip is a bool; it takes = or != (not >)"}},
		{`due > 2026`, 7, []string{"due is a time", `use a quoted time, e.g. "2026-12-01"`}},
		{`due > "soon"`, 7, []string{"due is a time", `"soon" is not a time in RFC 3339`}},
		{`started > 2026-12-01`, 11, []string{`2026-12-01 looks like a date or time; quote it: "2026-12-01"`}},
		{`tags = "eu"`, 6, []string{`tags is a keyword_list; compare it with contains: tags contains "..."`}},
		{`tags in ("eu")`, 6, []string{"tags is a keyword_list; in works on keyword, int, float and time"}},
		{`customer contains "c"`, 10, []string{"customer is a keyword; contains works on text and keyword_list", `customer = "..."`}},
		{`note < "a"`, 6, []string{"note is a text; it takes = or != (not <)"}},
		{`tags contains 1`, 15, []string{`tags contains takes a string, got number 1`}},
		{`status = "runing"`, 10, []string{`unknown status "runing"; use one of pending, running`}},
		// syntax
		{`customer == "c-42"`, 10, []string{`"==" is not an operator; write "="`}},
		{`customer <> "c-42"`, 10, []string{`"<>" is not an operator; write "!="`}},
		{`! customer = "a"`, 1, []string{`"!" alone is not an operator`}},
		{`customer = "c-42`, 12, []string{"the string that starts here has no closing \""}},
		{`customer = "a\q"`, 14, []string{`unknown escape "\q"`}},
		{`customer "a"`, 10, []string{`expected an operator after customer`}},
		{`customer =`, 11, []string{"customer is a keyword, and the end of the filter is not one"}},
		{`(customer = "a"`, 16, []string{`expected ")" to close the "(" at column 1, got the end of the filter`}},
		{`customer = "a")`, 15, []string{`expected "and", "or" or the end of the filter, got ")"`}},
		{`customer = "a" and`, 19, []string{"the filter ends where a comparison was expected"}},
		{`and customer = "a"`, 1, []string{`expected an attribute name, "not" or "(", got "and"`}},
		{`customer in "a"`, 13, []string{`expected "(" after in`}},
		{`customer in ("a" "b")`, 18, []string{`expected "," or ")" in the list of in`}},
		{`customer not = "a"`, 14, []string{`expected "in" after "customer not"`}},
		{`customer = "a" & vip = true`, 16, []string{`unexpected character '&'`}},
		{`amount = 12abc`, 10, []string{`"12abc" is not a number; quote text`}},
		{`amount = -`, 10, []string{`"-" does not start a number`}},
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			_, err := filter.Compile(tc.src, schema)
			require.Error(t, err)
			require.True(t, errors.Is(err, filter.ErrInvalid))
			var fe *filter.Error
			require.ErrorAs(t, err, &fe)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			require.Equal(t, tc.col, fe.Pos+1, "column of %q", err)
		})
	}
}

// TestSchema: built-ins are always known, an undeclared schema says how to declare, and an
// attribute declared with two types is refused until one definition is chosen.
func TestSchema(t *testing.T) {
	t.Parallel()
	_, err := filter.Compile(`customer = "a"`, filter.Schema{})
	require.ErrorContains(t, err, "no search attribute is declared by the definitions listed (declare them with flow.WithSearchAttributes)")

	s := filter.NewSchema("", filter.Declared{Definition: "order", Attributes: []event.AttributeDecl{{Name: "amount", Type: event.AttrInt}}},
		filter.Declared{Definition: "refund", Attributes: []event.AttributeDecl{{Name: "amount", Type: event.AttrFloat}, {Name: "reason", Type: event.AttrText}}})
	_, err = filter.Compile(`amount > 1`, s)
	require.ErrorContains(t, err, `attribute "amount" is declared int by definition "order" and float by definition "refund"`)
	_, err = filter.Compile(`reason contains "late"`, s)
	require.NoError(t, err)

	names := make([]string, 0)
	for _, b := range filter.Builtins() {
		names = append(names, b.Name)
	}
	require.Equal(t, event.ReservedAttributeNames(), names, "every built-in is a reserved attribute name")
	require.True(t, slices.Contains(names, "status"))
}

// TestLimits: a filter beyond the length, depth or size limits is refused, not evaluated.
func TestLimits(t *testing.T) {
	t.Parallel()
	deep := ""
	for range 200 {
		deep += "("
	}
	_, err := filter.Compile(deep+`vip = true`, schema)
	require.ErrorContains(t, err, "nests deeper than")
	many := `vip = true`
	for range filter.MaxTerms {
		many += ` or vip = true`
	}
	_, err = filter.Compile(many, schema)
	require.ErrorContains(t, err, "more than 256 comparisons")
	long := make([]byte, filter.MaxLength+1)
	for i := range long {
		long[i] = ' '
	}
	long[0] = 'v'
	_, err = filter.Compile(string(long), schema)
	require.ErrorContains(t, err, "the limit is 4096")
}

// FuzzCompile: the parser never panics, and whatever compiles evaluates without panicking.
func FuzzCompile(f *testing.F) {
	for _, seed := range []string{`customer = "c-42" and status = "running" and started > "2026-12-01"`,
		`not (amount in (1, 2, 3)) or tags contains "x"`, `note contains 'a\'b'`, `score >= -1.5e3`, `((vip = true))`,
		`due < "2026-12-24T18:00:00Z"`, `"`, `(`, `a`, `!`, `1e`, `-.`} {
		f.Add(seed)
	}
	r := run(f)
	f.Fuzz(func(t *testing.T, src string) {
		flt, err := filter.Compile(src, schema)
		if err != nil {
			var fe *filter.Error
			if !errors.As(err, &fe) {
				t.Fatalf("Compile(%q) returned %T, not *filter.Error", src, err)
			}
			return
		}
		flt.Match(r)
		flt.Match(core.Summary{})
	})
}

// BenchmarkMatch measures one filter over one run: the cost per run of a filtered listing.
func BenchmarkMatch(b *testing.B) {
	f, err := filter.Compile(`customer = "c-42" and status = "running" and started > "2026-12-01" and (amount >= 100 or tags contains "vip")`, schema)
	require.NoError(b, err)
	r := run(b)
	b.ReportAllocs()
	for b.Loop() {
		if !f.Match(r) {
			b.Fatal("no match")
		}
	}
}

// BenchmarkCompile measures parsing and checking a typical filter.
func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := filter.Compile(`customer = "c-42" and status = "running" and started > "2026-12-01"`, schema); err != nil {
			b.Fatal(err)
		}
	}
}
