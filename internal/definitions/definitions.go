// Package definitions holds the registrations of workflow definitions, the FLOW_DEFINITIONS
// bucket: what the latest worker to register a definition on a queue published about it. Each
// worker writes its own definitions' entries at start and never removes them (which workers are
// alive is in FLOW_WORKERS, internal/liveness); the history service, the ingress and the
// liveness view read and watch them.
package definitions

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/typedkv"
	"github.com/flowrun/flow/pkg/event"
)

// Definition is what a worker publishes about a workflow it runs, the FLOW_DEFINITIONS entry of
// its definition on its queue. Clients read it to start runs with the right spec.
type Definition struct {
	Definition string    `json:"definition"`
	Queue      string    `json:"queue"`
	BuildID    string    `json:"build_id,omitempty"`
	Patches    []string  `json:"patches,omitempty"`
	UpdatedAt  time.Time `json:"updated_at"`
	Host       string    `json:"host,omitempty"`
	// Attributes are the search attributes the definition declares, sorted by name.
	Attributes []event.AttributeDecl `json:"attributes,omitempty"`
	// Control is the definition's flow control, with its key path (see liveness.Registration).
	Control *event.FlowControl `json:"control,omitempty"`
	// Timeouts are the definition's default run timeouts (see liveness.Registration).
	Timeouts *event.RunTimeouts `json:"timeouts,omitempty"`
	// Retention is how long the history of an ended run of the definition is kept
	// (flow.WithRetention); 0 for the retention sweeper's default (docs/retention.md).
	Retention event.Duration `json:"retention,omitempty"`
}

// Key identifies definition on queue ("" is the default queue): its FLOW_DEFINITIONS key,
// "<queue>.<definition>", which also names it in the maps of those that follow the bucket.
func Key(queue, definition string) string {
	if queue == "" {
		queue = streams.DefaultQueue
	}
	return queue + "." + definition
}

// Entry is a FLOW_DEFINITIONS entry as read or watched; its Key is Key(Queue, Definition).
type Entry = typedkv.Entry[Definition]

// Watcher follows FLOW_DEFINITIONS (Store.Watch).
type Watcher = typedkv.Watcher[Definition]

// Store is the FLOW_DEFINITIONS repository. It is safe for concurrent use.
type Store struct {
	b *typedkv.Bucket[Definition]
}

// Open opens FLOW_DEFINITIONS on js.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	b, err := typedkv.Open[Definition](ctx, js, streams.DefinitionsBucket)
	if err != nil {
		return nil, err
	}
	return &Store{b: b}, nil
}

// Put records d as the latest registration of its definition on its queue. Only the worker
// that registers d writes it.
func (s *Store) Put(ctx context.Context, d Definition) error {
	_, err := s.b.Put(ctx, Key(d.Queue, d.Definition), d)
	return err
}

// Get returns the latest registration of definition on queue; found is false when there is
// none, or when its entry does not decode.
func (s *Store) Get(ctx context.Context, queue, definition string) (d Definition, found bool, err error) {
	e, found, err := s.b.Get(ctx, Key(queue, definition))
	if err != nil || !found || e.Err != nil {
		return Definition{}, false, err
	}
	return e.Value, true, nil
}

// Watch follows the registrations: every entry there is, nil, then each change, until
// Watcher.Stop or the end of ctx.
func (s *Store) Watch(ctx context.Context) (*Watcher, error) { return s.b.Watch(ctx) }
