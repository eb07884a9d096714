package jshost

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/pauses"
	"github.com/flowrun/flow/internal/typedkv"
)

// Pauses implements engine.Pauses on the FLOW_PAUSES bucket. Opened with watch, it keeps the
// bucket's entries in memory, from a watch, so that Held answers at once; otherwise Held
// answers from the writes made through it only (for processes that only pause and unpause,
// such as the ingress). It is safe for concurrent use.
type Pauses struct {
	b        *typedkv.Bucket[pauses.Pause]
	logger   *slog.Logger
	onChange func(key string, p *pauses.Pause)

	mu      sync.RWMutex
	entries map[string]pauses.Pause
	watcher *typedkv.Watcher[pauses.Pause]
	done    chan struct{}
}

// PausesOptions configure NewPauses.
type PausesOptions struct {
	// Watch keeps the entries in memory from a watch of the bucket: NewPauses returns once the
	// entries that exist are loaded.
	Watch bool
	// OnChange, with Watch, is called after each change the watch delivers once loaded, with
	// the entry's key and its new value (nil once deleted), on the watch's goroutine.
	OnChange func(key string, p *pauses.Pause)
	Logger   *slog.Logger
}

// NewPauses opens the bucket on js. Flow's streams must exist.
func NewPauses(ctx context.Context, js jetstream.JetStream, opts PausesOptions) (*Pauses, error) {
	b, err := typedkv.Open[pauses.Pause](ctx, js, streams.PausesBucket)
	if err != nil {
		return nil, err
	}
	p := &Pauses{b: b, logger: opts.Logger, onChange: opts.OnChange, entries: map[string]pauses.Pause{}, done: make(chan struct{})}
	if p.logger == nil {
		p.logger = slog.Default()
	}
	if !opts.Watch {
		close(p.done)
		return p, nil
	}
	if p.watcher, err = b.Watch(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	loaded := make(chan struct{})
	go p.follow(loaded)
	select {
	case <-loaded:
		return p, nil
	case <-ctx.Done():
		_ = p.watcher.Stop()
		return nil, ctx.Err()
	}
}

func (p *Pauses) follow(loaded chan struct{}) {
	defer close(p.done)
	isLoaded := false
	for e := range p.watcher.Updates() {
		if e == nil {
			if !isLoaded {
				isLoaded = true
				close(loaded)
			}
			continue
		}
		if e.Err != nil {
			p.logger.Warn("ignoring a malformed pause entry", slog.String("key", e.Key), slog.String("error", e.Err.Error()))
			continue
		}
		var v *pauses.Pause
		p.mu.Lock()
		if e.Deleted {
			delete(p.entries, e.Key)
		} else {
			pause := e.Value
			p.entries[e.Key] = pause
			v = &pause
		}
		p.mu.Unlock()
		if isLoaded && p.onChange != nil {
			p.onChange(e.Key, v)
		}
	}
}

// Stop ends the watch, if any, and waits for it.
func (p *Pauses) Stop() {
	if p.watcher != nil {
		_ = p.watcher.Stop()
	}
	<-p.done
}

// Held implements engine.Pauses.
func (p *Pauses) Held(definition, queue string) (pauses.Pause, bool) {
	if queue == "" {
		queue = streams.DefaultQueue
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if len(p.entries) == 0 {
		return pauses.Pause{}, false
	}
	if e, ok := p.entries[pauses.Key(pauses.ScopeDefinition, definition)]; ok {
		return e, true
	}
	e, ok := p.entries[pauses.Key(pauses.ScopeQueue, queue)]
	return e, ok
}

// Active reports whether the pause of key exists, as the watch last saw it.
func (p *Pauses) Active(key string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	_, ok := p.entries[key]
	return ok
}

// Put implements engine.Pauses.
func (p *Pauses) Put(ctx context.Context, pause pauses.Pause) error {
	if _, err := p.b.Put(ctx, pause.Key(), pause); err != nil {
		return fmt.Errorf("writing pause %s: %w", pause.Key(), err)
	}
	p.mu.Lock()
	p.entries[pause.Key()] = pause
	p.mu.Unlock()
	return nil
}

// Delete implements engine.Pauses.
func (p *Pauses) Delete(ctx context.Context, scope, name string) (bool, error) {
	key := pauses.Key(scope, name)
	_, found, err := p.b.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("reading pause %s: %w", key, err)
	}
	if !found {
		return false, nil
	}
	if err := p.b.Delete(ctx, key, 0); err != nil {
		return false, fmt.Errorf("deleting pause %s: %w", key, err)
	}
	p.mu.Lock()
	delete(p.entries, key)
	p.mu.Unlock()
	return true, nil
}

// List implements engine.Pauses.
func (p *Pauses) List(ctx context.Context) ([]pauses.Pause, error) {
	entries, err := p.b.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing pauses: %w", err)
	}
	var out []pauses.Pause
	for _, e := range entries {
		if e.Err == nil {
			out = append(out, e.Value)
		}
	}
	return out, nil
}
