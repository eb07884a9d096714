// Package pauses holds the record of a definition or queue pause, a FLOW_PAUSES entry, and its
// key format. The bucket's repository is jshost.Pauses (the engine's engine.Pauses port); the
// ingress is the bucket's one writer, and workers and the history service watch it. This package
// imports no NATS, so that the engine can name pauses without it. See docs/pause.md.
package pauses

import (
	"fmt"
	"strings"
	"time"
)

// Pause scopes: what a FLOW_PAUSES entry pauses.
const (
	ScopeDefinition = "definition"
	ScopeQueue      = "queue"
)

// Pause is a FLOW_PAUSES entry: a paused definition or queue. While it exists workers start no
// decision and no step attempt of the runs it covers; they park those runs (parked.Run.Pause), and
// the history service dispatches them again once the entry is deleted. See docs/pause.md.
type Pause struct {
	// Scope is ScopeDefinition or ScopeQueue; Name the definition or queue.
	Scope string `json:"scope"`
	Name  string `json:"name"`
	// Note says why, By who paused it, and At when.
	Note string    `json:"note,omitempty"`
	By   string    `json:"by,omitempty"`
	At   time.Time `json:"at"`
}

// Key returns the entry's key, "<scope>.<name>".
func (p Pause) Key() string { return Key(p.Scope, p.Name) }

// Key returns the FLOW_PAUSES key of scope and name.
func Key(scope, name string) string { return scope + "." + name }

// ParseKey splits a FLOW_PAUSES key into its scope and name.
func ParseKey(key string) (scope, name string, err error) {
	scope, name, ok := strings.Cut(key, ".")
	if !ok || name == "" || scope != ScopeDefinition && scope != ScopeQueue {
		return "", "", fmt.Errorf("%q is not a pause key (definition.<name> or queue.<name>)", key)
	}
	return scope, name, nil
}

// Describe says what holds the runs, for `flow runs`, `flow status` and the UI.
func (p Pause) Describe() string {
	s := fmt.Sprintf("%s %q is paused", p.Scope, p.Name)
	if p.By != "" {
		s += " by " + p.By
	}
	if !p.At.IsZero() {
		s += " since " + p.At.UTC().Format(time.RFC3339)
	}
	if p.Note != "" {
		s += ": " + p.Note
	}
	return s + fmt.Sprintf("; `flow unpause --%s %s` releases its runs", p.Scope, p.Name)
}
