package liveness

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/definitions"
	"github.com/flowrun/flow/pkg/event"
)

// Definition is a workflow definition on a queue as a View knows it: its latest registration
// and the live workers that register it.
type Definition struct {
	Definition string `json:"definition"`
	Queue      string `json:"queue"`
	// BuildID and Patches are those of the live worker that started last, or, when no worker is
	// alive, of the definition's latest registration.
	BuildID string   `json:"build_id,omitempty"`
	Patches []string `json:"patches,omitempty"`
	// Attributes are the declared search attributes, from the same registration as Patches.
	Attributes []event.AttributeDecl `json:"attributes,omitempty"`
	// UpdatedAt is when a worker last registered the definition in FLOW_DEFINITIONS; zero
	// when the View holds no registration (a live worker registers it all the same).
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Workers are the live workers that register the definition, the last started first.
	Workers []Worker `json:"workers"`
	// LastSeen is the latest heartbeat the View saw of a worker registering the definition;
	// zero when it saw none.
	LastSeen time.Time `json:"last_seen,omitzero"`
	// Control is the flow control of the live worker that started last (see Registration).
	Control *event.FlowControl `json:"control,omitempty"`
	// Timeouts are the default run timeouts of the live worker that started last.
	Timeouts *event.RunTimeouts `json:"timeouts,omitempty"`
}

// View is an in-memory copy of FLOW_WORKERS and FLOW_DEFINITIONS, kept up to date by watching
// both buckets until Stop or the end of Watch's context. It is safe for concurrent use, and its
// reads make no round trip. A worker counts as alive while its entry exists and, should the
// bucket's expiry of a dead worker's entry not reach the View, for at most the bucket's TTL
// after the View last received its entry.
type View struct {
	kv     jetstream.KeyValue
	ttl    time.Duration
	logger *slog.Logger

	mu sync.RWMutex
	// workers are the entries of FLOW_WORKERS by key, with when the View received them.
	workers map[string]seen
	// records are the FLOW_DEFINITIONS registrations by definitions.Key.
	records map[string]definitions.Definition
	// lastSeen is the latest heartbeat of a worker registering a definition, by
	// definitions.Key.
	lastSeen map[string]time.Time

	cancel context.CancelFunc
	done   chan struct{}
}

type seen struct {
	Worker
	received time.Time
}

// Watch returns a View of the live workers, once it holds the buckets' current entries. It
// follows them until ctx ends or Stop is called. logger nil is slog.Default().
func Watch(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) (*View, error) {
	if logger == nil {
		logger = slog.Default()
	}
	kv, err := js.KeyValue(ctx, streams.WorkersBucket)
	if err != nil {
		return nil, fmt.Errorf("liveness: opening bucket %s: %w (streams.Ensure creates it)", streams.WorkersBucket, err)
	}
	defs, err := definitions.Open(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("liveness: %w", err)
	}
	ttl, err := bucketTTL(ctx, kv)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	workersW, err := kv.WatchAll(runCtx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("liveness: watching bucket %s: %w", streams.WorkersBucket, err)
	}
	defsW, err := defs.Watch(runCtx)
	if err != nil {
		_ = workersW.Stop()
		cancel()
		return nil, fmt.Errorf("liveness: %w", err)
	}
	v := &View{kv: kv, ttl: ttl, logger: logger.With(slog.String("component", "liveness")), workers: map[string]seen{},
		records: map[string]definitions.Definition{}, lastSeen: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	ready := make(chan struct{})
	go v.follow(runCtx, workersW, defsW, ready)
	select {
	case <-ready:
		return v, nil
	case <-v.done:
		cancel()
		return nil, fmt.Errorf("liveness: the watches of %s and %s closed before they delivered the current entries (is the connection closed?)",
			streams.WorkersBucket, streams.DefinitionsBucket)
	case <-ctx.Done():
		cancel()
		<-v.done
		return nil, ctx.Err()
	}
}

// follow applies the buckets' changes until ctx ends or both watchers close, and closes ready
// once it applied both buckets' current entries.
func (v *View) follow(ctx context.Context, workersW jetstream.KeyWatcher, defsW *definitions.Watcher, ready chan struct{}) {
	defer close(v.done)
	defer func() { _ = workersW.Stop(); _ = defsW.Stop() }()
	workers, defs := workersW.Updates(), defsW.Updates()
	pending := 2 // buckets whose current entries are not all applied yet
	sweep := time.NewTicker(v.ttl)
	defer sweep.Stop()
	for workers != nil || defs != nil {
		select {
		case e, ok := <-workers:
			switch {
			case !ok:
				workers = nil
			case e == nil:
				if pending--; pending == 0 {
					close(ready)
				}
			default:
				v.applyWorker(e)
			}
		case e, ok := <-defs:
			switch {
			case !ok:
				defs = nil
			case e == nil:
				if pending--; pending == 0 {
					close(ready)
				}
			default:
				v.applyDefinition(e)
			}
		case <-sweep.C:
			v.sweep()
		case <-ctx.Done():
			return
		}
	}
}

func (v *View) applyWorker(e jetstream.KeyValueEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut { // stopped (deleted), or expired (purged by the bucket's TTL)
		delete(v.workers, e.Key())
		return
	}
	var w Worker
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		v.logger.Warn("ignoring a worker entry that is not JSON", slog.String("key", e.Key()), slog.String("error", err.Error()))
		return
	}
	if w.Queue == "" {
		w.Queue, _, _ = strings.Cut(e.Key(), ".")
	}
	v.workers[e.Key()] = seen{Worker: w, received: time.Now()}
	for _, r := range w.Definitions {
		k := definitions.Key(w.Queue, r.Definition)
		if w.BeatAt.After(v.lastSeen[k]) {
			v.lastSeen[k] = w.BeatAt
		}
	}
}

func (v *View) applyDefinition(e *definitions.Entry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e.Deleted {
		delete(v.records, e.Key)
		return
	}
	if e.Err != nil {
		v.logger.Warn("ignoring a definition entry that is not JSON", slog.String("key", e.Key), slog.String("error", e.Err.Error()))
		return
	}
	v.records[e.Key] = e.Value
}

// sweep drops the workers whose entries the View should have seen expire.
func (v *View) sweep() {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := time.Now()
	for k, w := range v.workers {
		if !v.alive(w, now) {
			delete(v.workers, k)
		}
	}
}

func (v *View) alive(w seen, now time.Time) bool { return now.Sub(w.received) < v.ttl }

// TTL returns the bucket's TTL as the View read it at Watch: how long a dead worker can count
// as alive.
func (v *View) TTL() time.Duration { return v.ttl }

// Stop stops following the buckets; the View keeps answering from what it held. It is
// idempotent.
func (v *View) Stop() {
	v.cancel()
	<-v.done
}

// Workers returns the live workers of queue ("" for every queue), sorted by queue, name and ID.
func (v *View) Workers(queue string) []Worker {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.live(queue)
}

// live returns the live workers of queue ("" for all), sorted; its caller holds v.mu.
func (v *View) live(queue string) []Worker {
	now := time.Now()
	var out []Worker
	for _, w := range v.workers {
		if (queue == "" || w.Queue == queue) && v.alive(w, now) {
			out = append(out, w.Worker)
		}
	}
	slices.SortFunc(out, func(a, b Worker) int {
		return cmp.Or(strings.Compare(a.Queue, b.Queue), strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
	})
	return out
}

// Serves returns workflow definition on queue ("" is streams.DefaultQueue) and whether a live
// worker registers it.
func (v *View) Serves(queue, definition string) (Definition, bool) {
	if queue == "" {
		queue = streams.DefaultQueue
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	d := v.definition(queue, definition, v.live(queue))
	return d, len(d.Workers) > 0
}

// Require returns workflow definition on queue ("" is streams.DefaultQueue) if a live worker
// registers it, and otherwise a *NoWorkerError (wrapping ErrNoWorker) that says when a worker
// serving it was last seen and which definitions the queue's live workers serve. A View can lag
// a worker that just started by a round trip; a caller about to refuse on ErrNoWorker for good
// can confirm with Fetch.
func (v *View) Require(queue, definition string) (Definition, error) {
	if queue == "" {
		queue = streams.DefaultQueue
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	live := v.live(queue)
	d := v.definition(queue, definition, live)
	if len(d.Workers) > 0 {
		return d, nil
	}
	var known []string
	for _, w := range live {
		for _, r := range w.Definitions {
			known = append(known, r.Definition)
		}
	}
	slices.Sort(known)
	return d, &NoWorkerError{Queue: queue, Definition: definition, LastSeen: d.LastSeen, RegisteredAt: d.UpdatedAt,
		Known: slices.Compact(known), At: time.Now().UTC()}
}

// definition assembles definition on queue from the live workers of the queue; its caller
// holds v.mu.
func (v *View) definition(queue, definition string, live []Worker) Definition {
	k := definitions.Key(queue, definition)
	d := Definition{Definition: definition, Queue: queue, LastSeen: v.lastSeen[k], Workers: []Worker{}}
	if r, ok := v.records[k]; ok {
		d.BuildID, d.Patches, d.UpdatedAt, d.Attributes = r.BuildID, r.Patches, r.UpdatedAt, r.Attributes
	}
	for _, w := range live {
		if w.Registers(definition) {
			d.Workers = append(d.Workers, w)
		}
	}
	slices.SortStableFunc(d.Workers, func(a, b Worker) int { return b.StartedAt.Compare(a.StartedAt) })
	if len(d.Workers) > 0 {
		r, _ := d.Workers[0].registration(definition)
		d.BuildID, d.Patches, d.Attributes, d.Control = d.Workers[0].BuildID, r.Patches, r.Attributes, r.Control
		d.Timeouts = r.Timeouts
	}
	return d
}

// List returns every definition the View knows (registered in FLOW_DEFINITIONS, or registered
// by a live worker), with its live workers, sorted by queue and definition.
func (v *View) List() []Definition {
	v.mu.RLock()
	defer v.mu.RUnlock()
	type qd struct{ queue, definition string }
	names := map[qd]bool{}
	for _, r := range v.records {
		names[qd{r.Queue, r.Definition}] = true
	}
	live := v.live("")
	byQueue := map[string][]Worker{}
	for _, w := range live {
		byQueue[w.Queue] = append(byQueue[w.Queue], w)
		for _, r := range w.Definitions {
			names[qd{w.Queue, r.Definition}] = true
		}
	}
	out := make([]Definition, 0, len(names))
	for n := range names {
		out = append(out, v.definition(n.queue, n.definition, byQueue[n.queue]))
	}
	slices.SortFunc(out, func(a, b Definition) int {
		return cmp.Or(strings.Compare(a.Queue, b.Queue), strings.Compare(a.Definition, b.Definition))
	})
	return out
}

// Fetch reads the live workers of queue ("" is streams.DefaultQueue) from the bucket itself, a
// round trip, sorted as Workers sorts them. It is for a caller about to act on an absence (park
// a run, refuse a start) that must not trust a View lagging a worker that just started; the
// View itself is not changed.
func (v *View) Fetch(ctx context.Context, queue string) ([]Worker, error) {
	if queue == "" {
		queue = streams.DefaultQueue
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := v.kv.Watch(ctx, queue+".*")
	if err != nil {
		return nil, fmt.Errorf("liveness: reading the workers of queue %q: %w", queue, err)
	}
	defer func() { _ = w.Stop() }()
	var out []Worker
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("liveness: reading the workers of queue %q: the watch closed", queue)
			}
			if e == nil {
				slices.SortFunc(out, func(a, b Worker) int { return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID)) })
				return out, nil
			}
			var wk Worker
			if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &wk) != nil {
				continue
			}
			if wk.Queue == "" {
				wk.Queue = queue
			}
			out = append(out, wk)
		case <-ctx.Done():
			return nil, fmt.Errorf("liveness: reading the workers of queue %q: %w", queue, ctx.Err())
		}
	}
}
