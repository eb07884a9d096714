package core

import (
	"fmt"
	"strings"
)

// CheckKeyPath checks a flow-control key path: "$" then one or more ".name" segments (letters,
// digits, '_' or '-'), such as "$.customer" or "$.order.region".
func CheckKeyPath(path string) error {
	_, err := SplitKeyPath(path)
	return err
}

// SplitKeyPath checks a key path and returns its field names, in order.
func SplitKeyPath(path string) ([]string, error) {
	rest, ok := strings.CutPrefix(path, "$.")
	if !ok || rest == "" {
		return nil, fmt.Errorf("flow: key path %q must start with \"$.\" and name a field, such as \"$.customer\"", path)
	}
	parts := strings.Split(rest, ".")
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("flow: key path %q has an empty segment", path)
		}
		for _, r := range p {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
				return nil, fmt.Errorf("flow: key path %q: segment %q may hold only letters, digits, '_' and '-'", path, p)
			}
		}
	}
	return parts, nil
}
