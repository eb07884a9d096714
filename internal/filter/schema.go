package filter

import (
	"fmt"
	"slices"

	"github.com/flowrun/flow/pkg/event"
)

// Declared is the search attributes one workflow definition declares.
type Declared struct {
	Definition string
	Attributes []event.AttributeDecl
}

// NewSchema returns the schema of runs of the definitions defs: every attribute any of them
// declares. An attribute two definitions declare with different types is a conflict, refused
// when a filter names it. defaultQueue names the queue of runs that record none ("" for
// "default").
func NewSchema(defaultQueue string, defs ...Declared) Schema {
	s := Schema{Attributes: map[string]event.AttributeType{}, DefaultQueue: defaultQueue}
	by := map[string]string{} // attribute -> the first definition that declared it
	slices.SortFunc(defs, func(a, b Declared) int {
		if a.Definition < b.Definition {
			return -1
		}
		if a.Definition > b.Definition {
			return 1
		}
		return 0
	})
	for _, d := range defs {
		for _, a := range d.Attributes {
			prev, ok := s.Attributes[a.Name]
			if !ok {
				s.Attributes[a.Name], by[a.Name] = a.Type, d.Definition
				continue
			}
			if prev != a.Type {
				if s.Conflicts == nil {
					s.Conflicts = map[string]string{}
				}
				if _, seen := s.Conflicts[a.Name]; !seen {
					s.Conflicts[a.Name] = fmt.Sprintf("attribute %q is declared %s by definition %q and %s by definition %q; filter one definition at a time (definition = %q and ...)",
						a.Name, prev, by[a.Name], a.Type, d.Definition, d.Definition)
				}
			}
		}
	}
	return s
}
