package sdk

import (
	"context"
	"encoding/json"
)

// Beater is what step code's flow.Heartbeat and flow.HeartbeatDetails reach through the
// attempt's context. The runtime that runs the attempt (services/worker's heartbeats) puts one
// there with WithBeater; it must be safe for concurrent use by the attempt's goroutines.
type Beater interface {
	// Beat records details (JSON) as the attempt's progress, throttled; it may learn that the
	// attempt should stop, and then cancels the attempt's context.
	Beat(ctx context.Context, details json.RawMessage) error
	// Details returns the details the latest heartbeat of an earlier attempt of the step
	// recorded, and whether there were any.
	Details(ctx context.Context) (json.RawMessage, bool, error)
}

type beaterKey struct{}

// WithBeater returns ctx carrying b.
func WithBeater(ctx context.Context, b Beater) context.Context {
	return context.WithValue(ctx, beaterKey{}, b)
}

// BeaterOf returns the Beater ctx carries, or nil outside a step attempt with heartbeats.
func BeaterOf(ctx context.Context) Beater {
	b, _ := ctx.Value(beaterKey{}).(Beater)
	return b
}
