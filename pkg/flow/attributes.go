package flow

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// SearchAttribute declares one typed search attribute of a workflow: indexed metadata of its
// runs that `flow runs --where`, the list API and the UI filter on (docs/search.md). Build it with
// [Keyword], [Text], [Int], [Float], [Bool], [Time] or [KeywordList].
type SearchAttribute = event.AttributeDecl

// Keyword declares a keyword attribute: a string compared as a whole (IDs, names, codes).
func Keyword(name string) SearchAttribute {
	return SearchAttribute{Name: name, Type: event.AttrKeyword}
}

// Text declares a text attribute: free text, compared whole or by substring.
func Text(name string) SearchAttribute { return SearchAttribute{Name: name, Type: event.AttrText} }

// Int declares an integer attribute.
func Int(name string) SearchAttribute { return SearchAttribute{Name: name, Type: event.AttrInt} }

// Float declares a floating-point attribute.
func Float(name string) SearchAttribute { return SearchAttribute{Name: name, Type: event.AttrFloat} }

// Bool declares a boolean attribute.
func Bool(name string) SearchAttribute { return SearchAttribute{Name: name, Type: event.AttrBool} }

// Time declares a time attribute (a UTC instant).
func Time(name string) SearchAttribute { return SearchAttribute{Name: name, Type: event.AttrTime} }

// KeywordList declares a list-of-keywords attribute, filtered by membership (contains).
func KeywordList(name string) SearchAttribute {
	return SearchAttribute{Name: name, Type: event.AttrKeywordList}
}

// WithSearchAttributes declares the search attributes of the workflow's runs. A run may start
// with any of them ([StartOptions].Attributes) and its code may change them with
// [Context.UpsertAttributes]; an undeclared attribute or a value of another type is refused. The
// declarations are published with the definition's registration, so that the ingress types a
// start's attributes and the history service a filter's. Registration panics on an invalid or
// repeated name.
func WithSearchAttributes(attrs ...SearchAttribute) WorkflowOption {
	return func(w *workflowEntry) { w.attributes = append(w.attributes, attrs...) }
}

// checkAttributes validates and sorts the declarations of workflow name, panicking on a
// programming error as registration does.
func checkAttributes(name string, decls []SearchAttribute) []SearchAttribute {
	for i, d := range decls {
		if err := d.Validate(); err != nil {
			panic(fmt.Sprintf("flow: RegisterWorkflow(%q): %v", name, err))
		}
		if slices.ContainsFunc(decls[:i], func(o SearchAttribute) bool { return o.Name == d.Name }) {
			panic(fmt.Sprintf("flow: RegisterWorkflow(%q): search attribute %q is declared twice", name, d.Name))
		}
	}
	if len(decls) > event.MaxAttributes {
		panic(fmt.Sprintf("flow: RegisterWorkflow(%q): %d search attributes; the limit is %d", name, len(decls), event.MaxAttributes))
	}
	out := slices.Clone(decls)
	slices.SortFunc(out, func(a, b SearchAttribute) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

// Attrs are search attribute values by name, as Go values: a string for keyword and text, any
// integer for int, any number for float, a bool, a time.Time for time, a []string for
// keyword_list, or for any type a string that reads as one ("42", "2026-12-01", "a,b"). The
// declaration of each name decides its type.
type Attrs map[string]any

// typeAttrs converts attrs to typed values by decls; what names the caller in errors.
func typeAttrs(what string, attrs Attrs, decls []SearchAttribute) (event.Attributes, error) {
	out := make(event.Attributes, len(attrs))
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		i := slices.IndexFunc(decls, func(d SearchAttribute) bool { return d.Name == name })
		if i < 0 {
			names := make([]string, len(decls))
			for j, d := range decls {
				names[j] = d.Name + " (" + string(d.Type) + ")"
			}
			return nil, fmt.Errorf("%s: search attribute %q is not declared (declared: %v); declare it with flow.WithSearchAttributes", what, name, names)
		}
		v, err := event.NewAttribute(decls[i].Type, attrs[name])
		if err != nil {
			return nil, fmt.Errorf("%s: search attribute %q: %w", what, name, err)
		}
		out[name] = v
	}
	return out, nil
}

// UpsertAttributes sets search attributes of the run, as decision id: each value replaces the
// attribute's previous one, and the runs index shows the new values once the decision is
// committed. The run goes on at once: the next decision sees [Context.Upserted](id) true and the
// new values in [Context.Attributes]. Like every decision it is compared on replay: re-issuing
// id with other values is a non-determinism error naming the attribute; re-issuing it after it
// was recorded is an invalid decision, so guard it:
//
//	if !ctx.Upserted("stage-paid") {
//		return ctx.UpsertAttributes("stage-paid", flow.Attrs{"stage": "paid"}), nil
//	}
//
// Every name must be declared with [WithSearchAttributes], and every value of its declared type.
func (c *Context) UpsertAttributes(id string, attrs Attrs) Decision {
	typed, err := typeAttrs(fmt.Sprintf("UpsertAttributes(%q)", id), attrs, c.attributes)
	if err != nil {
		return core.Invalid{What: fmt.Sprintf("UpsertAttributes(%q)", id), Err: err}
	}
	return core.UpsertAttributes{ID: id, Attributes: typed}
}

// Upserted reports whether upsert id is recorded.
func (c *Context) Upserted(id string) bool {
	_, ok := c.s.Upserts[id]
	return ok
}

// Attributes returns the run's search attributes now, for reading only.
func (c *Context) Attributes() event.Attributes { return c.s.Attributes }

// Attribute decodes search attribute name into v (a string, number, bool, time string or
// []string, as its type records it) and reports whether the run has it.
func (c *Context) Attribute(name string, v any) (bool, error) {
	a, ok := c.s.Attributes[name]
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(a.Value, v); err != nil {
		return true, fmt.Errorf("decoding search attribute %q (%s) of run %q: %w", name, a.Type, c.s.RunID, err)
	}
	return true, nil
}

// startAttributes types the search attributes a new run of definition starts with, by the
// definition's declarations: the values the engine records in run.started.
func (r *Registry) startAttributes(definition string, attrs Attrs) (event.Attributes, error) {
	if len(attrs) == 0 {
		return nil, nil
	}
	w, err := r.workflow(definition)
	if err != nil {
		return nil, err
	}
	typed, err := typeAttrs(fmt.Sprintf("starting %q", definition), attrs, w.attributes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return typed, nil
}

// encodeAttrs renders attrs as the JSON values a start request carries; the ingress types them
// by the definition's declarations. A time.Time becomes its RFC 3339 text.
func encodeAttrs(attrs Attrs) (map[string]json.RawMessage, error) {
	if len(attrs) == 0 {
		return nil, nil
	}
	out := make(map[string]json.RawMessage, len(attrs))
	for name, v := range attrs {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%w: search attribute %q does not encode to JSON: %w", ErrInvalidInput, name, err)
		}
		out[name] = b
	}
	return out, nil
}
