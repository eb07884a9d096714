package filter

import (
	"slices"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// node is one checked expression.
type node interface {
	eval(f *Filter, sum *core.Summary) bool
}

type (
	andNode struct{ l, r node }
	orNode  struct{ l, r node }
	notNode struct{ x node }
	// cmpNode compares a field with a value: = != < <= > >=.
	cmpNode struct {
		f  field
		op string
		v  value
	}
	// inNode tests a field against a list of values; neg for "not in".
	inNode struct {
		f   field
		vs  []value
		neg bool
	}
	// containsNode tests a text field for a substring (case-insensitive) or a keyword list for
	// a member (exact).
	containsNode struct {
		f field
		s string
	}
)

func (n andNode) eval(f *Filter, sum *core.Summary) bool { return n.l.eval(f, sum) && n.r.eval(f, sum) }
func (n orNode) eval(f *Filter, sum *core.Summary) bool  { return n.l.eval(f, sum) || n.r.eval(f, sum) }
func (n notNode) eval(f *Filter, sum *core.Summary) bool { return !n.x.eval(f, sum) }

// Match reports whether the run summarised by sum passes the filter. A nil filter matches every
// run. A comparison, in or contains on an attribute the run does not have is false, "!=" and
// "not in" included; "not (...)" of it is true.
func (f *Filter) Match(sum core.Summary) bool {
	if f == nil {
		return true
	}
	return f.root.eval(f, &sum)
}

// read returns the run's value of fld, and whether it has one.
func (f *Filter) read(fld field, sum *core.Summary) (any, bool) {
	if fld.builtin {
		switch fld.name {
		case "run_id":
			return sum.RunID, true
		case "definition":
			return sum.Definition, true
		case "status":
			return string(sum.Status), true
		case "queue":
			if sum.Queue == "" {
				return f.defaultQueue, true
			}
			return sum.Queue, true
		case "build":
			return sum.BuildID, true
		case "parent":
			return sum.Parent, true
		case "started":
			return sum.StartedAt, true
		case "updated":
			return sum.UpdatedAt, true
		case "detail":
			return sum.Detail, true
		}
		return nil, false
	}
	a, ok := sum.Attributes[fld.name]
	if !ok || a.Type != fld.typ {
		return nil, false
	}
	switch fld.typ {
	case event.AttrKeyword, event.AttrText:
		return a.Str()
	case event.AttrInt:
		return a.Int()
	case event.AttrFloat:
		return a.Float()
	case event.AttrBool:
		return a.Bool()
	case event.AttrTime:
		return a.Time()
	case event.AttrKeywordList:
		return a.List()
	}
	return nil, false
}

// compare orders the run's value x against v: -1, 0 or 1.
func compare(x any, v value) int {
	switch x := x.(type) {
	case string:
		return strings.Compare(x, v.s)
	case int64:
		return cmpOrdered(x, v.i)
	case float64:
		return cmpOrdered(x, v.f)
	case bool:
		if x == v.b {
			return 0
		}
		if !x {
			return -1
		}
		return 1
	case time.Time:
		return x.Compare(v.t)
	}
	return 2 // never equal, never ordered
}

func cmpOrdered[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (n cmpNode) eval(f *Filter, sum *core.Summary) bool {
	x, ok := f.read(n.f, sum)
	if !ok {
		return false
	}
	c := compare(x, n.v)
	if c == 2 {
		return false
	}
	switch n.op {
	case "=":
		return c == 0
	case "!=":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	return false
}

func (n inNode) eval(f *Filter, sum *core.Summary) bool {
	x, ok := f.read(n.f, sum)
	if !ok {
		return false
	}
	found := slices.ContainsFunc(n.vs, func(v value) bool { return compare(x, v) == 0 })
	return found != n.neg
}

func (n containsNode) eval(f *Filter, sum *core.Summary) bool {
	x, ok := f.read(n.f, sum)
	if !ok {
		return false
	}
	switch x := x.(type) {
	case string:
		return strings.Contains(strings.ToLower(x), strings.ToLower(n.s))
	case []string:
		return slices.Contains(x, n.s)
	}
	return false
}
