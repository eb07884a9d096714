package metrics

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Backlog is one task consumer's pending messages.
type Backlog struct {
	Queue, Consumer string
	Pending         int64
}

// ObserveTaskBacklog registers an observable gauge of the tasks waiting in FLOW_TASKS consumers,
// read by backlog at each collection (not on any hot path). Call the returned function to
// unregister it.
func ObserveTaskBacklog(backlog func(context.Context) []Backlog) (unregister func(), err error) {
	g, err := meter.Int64ObservableGauge(TaskBacklogName, metric.WithUnit("{task}"),
		metric.WithDescription("Resume tasks pending (not yet delivered) in the FLOW_TASKS consumers this process serves, by queue and consumer."))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for _, b := range backlog(ctx) {
			o.ObserveInt64(g, b.Pending, metric.WithAttributes(KeyQueue.String(b.Queue), KeyConsumer.String(b.Consumer)))
		}
		return nil
	}, g)
	if err != nil {
		return nil, err
	}
	return func() { _ = reg.Unregister() }, nil
}

// ObserveBlockedRuns registers an observable gauge of the runs that are blocked, counted by
// blocked at each collection. Call the returned function to unregister it.
func ObserveBlockedRuns(blocked func() int64) (unregister func(), err error) {
	g, err := meter.Int64ObservableGauge(BlockedRunsName, metric.WithUnit("{run}"),
		metric.WithDescription("Runs whose decision failed (blocked until a deploy or `flow resume`), as the history service's runs index shows them."))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g, blocked(), metric.WithAttributeSet(attribute.NewSet()))
		return nil
	}, g)
	if err != nil {
		return nil, err
	}
	return func() { _ = reg.Unregister() }, nil
}
