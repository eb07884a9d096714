package history

import (
	"maps"
	"slices"
	"strings"

	"github.com/flowrun/flow/pkg/event"
)

// attrPairs renders search attributes as name=value pairs sorted by name, clipped.
func attrPairs(attrs event.Attributes) string {
	parts := make([]string, 0, len(attrs))
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		parts = append(parts, name+"="+attrs[name].String())
	}
	return clip(strings.Join(parts, " "), uiInline)
}
