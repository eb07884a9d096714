package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/streams"
)

// definitions resolves the definition a start names to the spec its run records.
type definitions interface {
	// require returns the definition registered as name on queue, or an error saying why a
	// run of it cannot start now.
	require(ctx context.Context, queue, name string) (streams.Definition, *api.IngressError)
}

// kvDefinitions reads FLOW_DEFINITIONS, where workers publish the definitions they run.
type kvDefinitions struct{ kv jetstream.KeyValue }

func newDefinitions(ctx context.Context, js jetstream.JetStream, _ *slog.Logger) (definitions, error) {
	kv, err := js.KeyValue(ctx, streams.DefinitionsBucket)
	if err != nil {
		return nil, err
	}
	return &kvDefinitions{kv: kv}, nil
}

func (d *kvDefinitions) require(ctx context.Context, queue, name string) (streams.Definition, *api.IngressError) {
	var def streams.Definition
	e, err := d.kv.Get(ctx, streams.DefinitionKey(queue, name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		hint := "no worker has registered a definition on this queue; is a worker (or `flow dev`) running?"
		if known := d.known(ctx, queue); len(known) > 0 {
			hint = "known: " + strings.Join(known, ", ")
		}
		return def, &api.IngressError{Code: api.CodeNoWorker, Message: fmt.Sprintf("workflow definition %q is not registered on queue %q (%s)", name, queue, hint)}
	}
	if err != nil {
		return def, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("reading definition %q: %v; retry", name, err)}
	}
	if err := json.Unmarshal(e.Value(), &def); err != nil {
		return def, &api.IngressError{Code: api.CodeIngressInternal, Message: fmt.Sprintf("definition %q is malformed in %s: %v", name, streams.DefinitionsBucket, err)}
	}
	return def, nil
}

func (d *kvDefinitions) known(ctx context.Context, queue string) []string {
	lister, err := d.kv.ListKeysFiltered(ctx, queue+".>")
	if err != nil {
		return nil
	}
	var names []string
	for k := range lister.Keys() {
		names = append(names, strings.TrimPrefix(k, queue+"."))
	}
	slices.Sort(names)
	return names
}
