package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/api"
	defs "github.com/flowrun/flow/internal/definitions"
	"github.com/flowrun/flow/internal/liveness"
)

// definitions resolves the definition a start names to the spec its run records.
type definitions interface {
	// require returns the definition a live worker serves as name on queue, or an error saying
	// why a run of it cannot start now.
	require(ctx context.Context, queue, name string) (defs.Definition, *api.IngressError)
	stop()
}

// liveDefinitions answers from the liveness view of FLOW_WORKERS: a start of a definition that
// no live worker serves is refused (docs/operations.md, "Starting a definition no live worker
// serves"). The view is kept in memory; a refusal is confirmed with one read of the bucket, so
// that a worker that started a moment ago is not missed.
type liveDefinitions struct{ view *liveness.View }

func newDefinitions(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) (definitions, error) {
	view, err := liveness.Watch(ctx, js, logger)
	if err != nil {
		return nil, err
	}
	return &liveDefinitions{view: view}, nil
}

func (d *liveDefinitions) stop() { d.view.Stop() }

func (d *liveDefinitions) require(ctx context.Context, queue, name string) (defs.Definition, *api.IngressError) {
	def, err := d.view.Require(queue, name)
	if err == nil {
		return defs.Definition{Definition: name, Queue: queue, BuildID: def.BuildID, Patches: def.Patches, Attributes: def.Attributes,
			Control: def.Control, Timeouts: def.Timeouts}, nil
	}
	if !errors.Is(err, liveness.ErrNoWorker) {
		return defs.Definition{}, &api.IngressError{Code: api.CodeIngressInternal, Message: err.Error()}
	}
	workers, ferr := d.view.Fetch(ctx, queue)
	if ferr != nil {
		return defs.Definition{}, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("%v; retry", ferr)}
	}
	// The worker that started last decides the build and patches, as the view does.
	var found *liveness.Worker
	for i, w := range workers {
		if w.Registers(name) && (found == nil || w.StartedAt.After(found.StartedAt)) {
			found = &workers[i]
		}
	}
	if found == nil {
		return defs.Definition{}, &api.IngressError{Code: api.CodeNoWorker, Message: trimFlow(err)}
	}
	out := defs.Definition{Definition: name, Queue: queue, BuildID: found.BuildID}
	for _, r := range found.Definitions {
		if r.Definition == name {
			out.Patches, out.Attributes, out.Control, out.Timeouts = r.Patches, r.Attributes, r.Control, r.Timeouts
		}
	}
	return out, nil
}
