package filter

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// Schema is what a filter may name: the built-in fields of every run (Builtins) and the search
// attributes declared by the definitions being listed. The zero value knows the built-ins only.
type Schema struct {
	// Attributes are the declared search attributes by name.
	Attributes map[string]event.AttributeType
	// Conflicts holds attributes declared with different types by different definitions, with
	// a message saying which; a filter that names one is refused with it. Filter on one
	// definition to resolve it.
	Conflicts map[string]string
	// DefaultQueue names the queue of a run that records none, for the built-in queue.
	// Defaults to "default".
	DefaultQueue string
}

// Builtin is a field every run has.
type Builtin struct {
	Name string
	Type event.AttributeType
	Doc  string
}

// Builtins returns the built-in fields, in documentation order. Their names are reserved: no
// search attribute may take one (event.ReservedAttributeNames).
func Builtins() []Builtin {
	return []Builtin{
		{"run_id", event.AttrKeyword, "the run's ID"},
		{"definition", event.AttrKeyword, "the workflow definition"},
		{"status", event.AttrKeyword, "the run's status: " + strings.Join(statusNames(), ", ")},
		{"queue", event.AttrKeyword, "the task queue"},
		{"build", event.AttrKeyword, "the build ID the run is pinned to (empty for none)"},
		{"parent", event.AttrKeyword, "the parent run of a child run (empty for none)"},
		{"started", event.AttrTime, "when the run started"},
		{"updated", event.AttrTime, "when the run's summary last changed"},
		{"detail", event.AttrText, "the failure, cancellation reason or blocking diagnosis"},
	}
}

var statuses = []core.Status{core.StatusPending, core.StatusRunning, core.StatusSuspended, core.StatusCancelling,
	core.StatusBlocked, core.StatusCompleted, core.StatusFailed, core.StatusCancelled, core.StatusContinuedAsNew,
	core.StatusPaused}

func statusNames() []string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}

// field is a checked reference to a built-in or an attribute.
type field struct {
	name    string
	typ     event.AttributeType
	builtin bool
}

// lookup resolves name, or says which names are known.
func (s Schema) lookup(src string, t token) (field, error) {
	for _, b := range Builtins() {
		if b.Name == t.text {
			return field{b.Name, b.Type, true}, nil
		}
	}
	if msg, ok := s.Conflicts[t.text]; ok {
		return field{}, &Error{src, t.pos, msg}
	}
	if typ, ok := s.Attributes[t.text]; ok {
		return field{t.text, typ, false}, nil
	}
	return field{}, &Error{src, t.pos, fmt.Sprintf("unknown attribute %q; known: %s", t.text, s.known())}
}

// known lists every name a filter may use, with its type.
func (s Schema) known() string {
	var parts []string
	for _, b := range Builtins() {
		parts = append(parts, b.Name+" ("+string(b.Type)+")")
	}
	for _, name := range slices.Sorted(maps.Keys(s.Attributes)) {
		if _, conflict := s.Conflicts[name]; !conflict {
			parts = append(parts, name+" ("+string(s.Attributes[name])+")")
		}
	}
	if len(s.Attributes) == 0 {
		return strings.Join(parts, ", ") + "; no search attribute is declared by the definitions listed (declare them with flow.WithSearchAttributes)"
	}
	return strings.Join(parts, ", ")
}

// Filter is a parsed and checked filter. The zero value is not usable; a nil *Filter matches
// every run.
type Filter struct {
	src          string
	root         node
	defaultQueue string
}

// String returns the filter's source.
func (f *Filter) String() string {
	if f == nil {
		return ""
	}
	return f.src
}

// Compile parses src and checks it against schema. An empty (or blank) src returns a nil
// filter, which matches every run. Errors are *Error, matching ErrInvalid.
func Compile(src string, schema Schema) (*Filter, error) {
	if strings.TrimSpace(src) == "" {
		return nil, nil
	}
	if len(src) > MaxLength {
		return nil, &Error{src, MaxLength, fmt.Sprintf("the filter is %d bytes long; the limit is %d", len(src), MaxLength)}
	}
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{src: src, toks: toks, schema: schema}
	root, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEOF {
		return nil, p.errorf(t, "expected \"and\", \"or\" or the end of the filter, got %s", t.describe())
	}
	q := schema.DefaultQueue
	if q == "" {
		q = "default"
	}
	return &Filter{src: src, root: root, defaultQueue: q}, nil
}

type parser struct {
	src    string
	toks   []token
	i      int
	terms  int
	schema Schema
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}

func (p *parser) errorf(t token, format string, args ...any) error {
	return &Error{p.src, t.pos, fmt.Sprintf(format, args...)}
}

func (p *parser) deeper(depth int) error {
	if depth > MaxDepth {
		return p.errorf(p.peek(), "the filter nests deeper than %d levels", MaxDepth)
	}
	return nil
}

// or = and { "or" and }
func (p *parser) or(depth int) (node, error) {
	if err := p.deeper(depth); err != nil {
		return nil, err
	}
	return p.leftAssoc(depth, tokOr, p.and, func(l, r node) node { return orNode{l, r} })
}

// and = unary { "and" unary }
func (p *parser) and(depth int) (node, error) {
	return p.leftAssoc(depth, tokAnd, p.unary, func(l, r node) node { return andNode{l, r} })
}

// leftAssoc parses operand { op operand }, each operand at depth+1, and joins the operands from
// the left: a op b op c is join(join(a, b), c).
func (p *parser) leftAssoc(depth int, op tokenKind, operand func(depth int) (node, error), join func(l, r node) node) (node, error) {
	left, err := operand(depth + 1)
	if err != nil {
		return nil, err
	}
	for p.peek().kind == op {
		p.next()
		right, err := operand(depth + 1)
		if err != nil {
			return nil, err
		}
		left = join(left, right)
	}
	return left, nil
}

// unary = "not" unary | "(" or ")" | predicate
func (p *parser) unary(depth int) (node, error) {
	if err := p.deeper(depth); err != nil {
		return nil, err
	}
	switch t := p.peek(); t.kind {
	case tokNot:
		p.next()
		x, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		return notNode{x}, nil
	case tokLParen:
		p.next()
		x, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		if r := p.next(); r.kind != tokRParen {
			return nil, p.errorf(r, "expected \")\" to close the \"(\" at column %d, got %s", t.pos+1, r.describe())
		}
		return x, nil
	case tokName:
		return p.predicate()
	case tokEOF:
		return nil, p.errorf(t, "the filter ends where a comparison was expected, such as status = \"running\"")
	default:
		return nil, p.errorf(t, "expected an attribute name, \"not\" or \"(\", got %s", t.describe())
	}
}

// predicate = name op literal | name ["not"] "in" "(" literal {"," literal} ")" | name "contains" literal
func (p *parser) predicate() (node, error) {
	nameTok := p.next()
	f, err := p.schema.lookup(p.src, nameTok)
	if err != nil {
		return nil, err
	}
	p.terms++
	if p.terms > MaxTerms {
		return nil, p.errorf(nameTok, "the filter has more than %d comparisons", MaxTerms)
	}
	switch t := p.next(); t.kind {
	case tokOp:
		lit := p.next()
		if err := p.allowed(f, t); err != nil {
			return nil, err
		}
		v, err := p.value(f, lit)
		if err != nil {
			return nil, err
		}
		return cmpNode{f: f, op: t.text, v: v}, nil
	case tokContains:
		lit := p.next()
		if f.typ != event.AttrText && f.typ != event.AttrKeywordList {
			return nil, p.errorf(t, "%s is %s; contains works on text and keyword_list attributes; %s", f.name, article(f.typ), usage(f))
		}
		if lit.kind != tokString {
			return nil, p.errorf(lit, "%s contains takes a string, got %s; write %s contains \"...\"", f.name, lit.describe(), f.name)
		}
		return containsNode{f: f, s: lit.text}, nil
	case tokNot, tokIn:
		neg := t.kind == tokNot
		if neg {
			if in := p.next(); in.kind != tokIn {
				return nil, p.errorf(in, "expected \"in\" after \"%s not\", got %s; to negate a comparison write not (%s ...)", f.name, in.describe(), f.name)
			}
		}
		if f.typ == event.AttrKeywordList || f.typ == event.AttrText || f.typ == event.AttrBool {
			return nil, p.errorf(t, "%s is %s; in works on keyword, int, float and time attributes; %s", f.name, article(f.typ), usage(f))
		}
		if l := p.next(); l.kind != tokLParen {
			return nil, p.errorf(l, "expected \"(\" after in, got %s; write %s in (\"a\", \"b\")", l.describe(), f.name)
		}
		var vs []value
		for {
			lit := p.next()
			v, err := p.value(f, lit)
			if err != nil {
				return nil, err
			}
			vs = append(vs, v)
			sep := p.next()
			if sep.kind == tokRParen {
				break
			}
			if sep.kind != tokComma {
				return nil, p.errorf(sep, "expected \",\" or \")\" in the list of in, got %s", sep.describe())
			}
		}
		return inNode{f: f, vs: vs, neg: neg}, nil
	default:
		return nil, p.errorf(t, "expected an operator after %s (= != < <= > >= in contains), got %s", f.name, t.describe())
	}
}

// allowed checks that op applies to f's type.
func (p *parser) allowed(f field, op token) error {
	switch f.typ {
	case event.AttrKeywordList:
		return p.errorf(op, "%s is a keyword_list; compare it with contains: %s contains \"...\"", f.name, f.name)
	case event.AttrBool, event.AttrText:
		if op.text != "=" && op.text != "!=" {
			return p.errorf(op, "%s is %s; it takes = or != (not %s); %s", f.name, article(f.typ), op.text, usage(f))
		}
	}
	return nil
}

// usage shows how to filter on f.
func usage(f field) string {
	switch f.typ {
	case event.AttrKeyword:
		return fmt.Sprintf("write %s = \"...\" or %s in (\"a\", \"b\")", f.name, f.name)
	case event.AttrText:
		return fmt.Sprintf("write %s = \"...\" or %s contains \"...\"", f.name, f.name)
	case event.AttrInt:
		return fmt.Sprintf("write %s >= 42", f.name)
	case event.AttrFloat:
		return fmt.Sprintf("write %s >= 4.2", f.name)
	case event.AttrBool:
		return fmt.Sprintf("write %s = true", f.name)
	case event.AttrTime:
		return fmt.Sprintf("write %s > \"2026-12-01\" or %s < \"2026-12-01T10:00:00Z\"", f.name, f.name)
	case event.AttrKeywordList:
		return fmt.Sprintf("write %s contains \"...\"", f.name)
	}
	return ""
}

func article(t event.AttributeType) string {
	if t == event.AttrInt {
		return "an int"
	}
	return "a " + string(t)
}

// value is a literal typed for its field.
type value struct {
	s string
	i int64
	f float64
	b bool
	t time.Time
}

// value reads lit as a value of f's type, or says what literal to write.
func (p *parser) value(f field, lit token) (value, error) {
	wrong := func() error {
		return p.errorf(lit, "%s is %s, and %s is not one; %s", f.name, article(f.typ), lit.describe(), literalHint(f))
	}
	switch f.typ {
	case event.AttrKeyword, event.AttrText:
		if lit.kind != tokString {
			return value{}, wrong()
		}
		if f.builtin && f.name == "status" && !slices.Contains(statusNames(), lit.text) {
			return value{}, p.errorf(lit, "unknown status %q; use one of %s", lit.text, strings.Join(statusNames(), ", "))
		}
		return value{s: lit.text}, nil
	case event.AttrInt:
		if lit.kind != tokNumber {
			return value{}, wrong()
		}
		n, err := strconv.ParseInt(lit.text, 10, 64)
		if err != nil {
			return value{}, p.errorf(lit, "%s is an int, and %s is not an integer; %s", f.name, lit.text, literalHint(f))
		}
		return value{i: n}, nil
	case event.AttrFloat:
		if lit.kind != tokNumber {
			return value{}, wrong()
		}
		x, err := strconv.ParseFloat(lit.text, 64)
		if err != nil || math.IsInf(x, 0) {
			return value{}, p.errorf(lit, "%s is out of range for a float", lit.text)
		}
		return value{f: x}, nil
	case event.AttrBool:
		if lit.kind != tokTrue && lit.kind != tokFalse {
			return value{}, wrong()
		}
		return value{b: lit.kind == tokTrue}, nil
	case event.AttrTime:
		if lit.kind != tokString {
			return value{}, wrong()
		}
		t, err := event.ParseAttributeTime(lit.text)
		if err != nil {
			return value{}, p.errorf(lit, "%s is a time, and %v; %s", f.name, err, literalHint(f))
		}
		return value{t: t}, nil
	}
	return value{}, wrong()
}

// literalHint says which literal a field takes.
func literalHint(f field) string {
	switch f.typ {
	case event.AttrKeyword, event.AttrText, event.AttrKeywordList:
		return "use a quoted string, e.g. \"c-42\""
	case event.AttrInt:
		return "use an integer literal, e.g. 42"
	case event.AttrFloat:
		return "use a number literal, e.g. 4.2"
	case event.AttrBool:
		return "use true or false"
	case event.AttrTime:
		return "use a quoted time, e.g. \"2026-12-01\" or \"2026-12-01T10:00:00Z\""
	}
	return ""
}
