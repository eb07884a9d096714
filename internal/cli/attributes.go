package cli

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// attrFlags reads repeated --attr NAME=VALUE flags. Values stay text: the ingress reads each as
// the type the definition declares for it (event.ParseAttribute).
func attrFlags(flags []string) (flow.Attrs, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	out := flow.Attrs{}
	for _, f := range flags {
		name, value, ok := strings.Cut(f, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, usageError{fmt.Errorf("--attr %q is not NAME=VALUE; write e.g. --attr customer=c-42", f)}
		}
		if err := event.ValidateAttributeName(name); err != nil {
			return nil, usageError{fmt.Errorf("--attr %q: %w", f, err)}
		}
		if _, dup := out[name]; dup {
			return nil, usageError{fmt.Errorf("--attr %s is given twice; give each attribute once", name)}
		}
		out[name] = value
	}
	return out, nil
}

// attrText renders search attributes as name=value pairs, sorted by name.
func attrText(attrs event.Attributes) string {
	parts := make([]string, 0, len(attrs))
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		parts = append(parts, name+"="+attrs[name].String())
	}
	return strings.Join(parts, " ")
}
