// Package telemetry sets up OpenTelemetry for a Flow process: the global TracerProvider,
// MeterProvider and propagator (W3C TraceContext and Baggage), a Prometheus exporter feeding
// every service's GET /metrics, and OTLP exporters when the standard OTEL_* environment
// variables ask for them.
//
// Instrumentation uses only the globals (otel.Tracer, otel.Meter), so it works whether or not
// the program called Setup. A program calls Setup once at start and Shutdown at exit; flowd and
// `flow dev` do. A program that embeds a service without calling Setup still gets its process's
// metrics on the service's /metrics: see MetricsHandler.
//
// Exporting (see docs/observability.md):
//   - Traces go over OTLP when OTEL_TRACES_EXPORTER names an exporter ("otlp", "console"; "none"
//     turns them off), or, with it unset, when OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. Otherwise spans are sampled and dropped.
//   - Metrics likewise, with OTEL_METRICS_EXPORTER and OTEL_EXPORTER_OTLP_METRICS_ENDPOINT;
//     "prometheus" adds nothing: /metrics always serves them.
//   - The exporters themselves read the rest of the specification's variables:
//     OTEL_EXPORTER_OTLP_PROTOCOL ("http/protobuf", the default, or "grpc"), the per-signal
//     *_PROTOCOL, *_ENDPOINT, *_HEADERS, *_TIMEOUT, *_INSECURE, *_CERTIFICATE,
//     OTEL_METRIC_EXPORT_INTERVAL, OTEL_BSP_*, OTEL_TRACES_SAMPLER, ...
//   - The resource names the service: service.name from OTEL_SERVICE_NAME, else Options.Service;
//     service.version from Options.Version; OTEL_RESOURCE_ATTRIBUTES adds more.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Options configures Setup.
type Options struct {
	// Service is the service.name of the resource unless OTEL_SERVICE_NAME says otherwise, such
	// as "flow-worker". Defaults to "flow".
	Service string
	// Version is the service.version of the resource. Defaults to none.
	Version string
	// Logger receives the errors OpenTelemetry reports (a failed export, ...). Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Telemetry is what Setup installed. Shut it down once, at exit.
type Telemetry struct {
	tracer   *sdktrace.TracerProvider
	meter    *sdkmetric.MeterProvider
	traces   string
	metrics  string
	resource *resource.Resource
}

// Setup installs the process's global TracerProvider, MeterProvider and propagator, with the
// exporters the environment asks for, and points MetricsHandler at the new MeterProvider's
// Prometheus registry. It returns an error naming the variable that is wrong when the
// environment asks for an exporter that cannot be made.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	res, err := newResource(ctx, opts, logger)
	if err != nil {
		return nil, err
	}
	traceOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	traces, spanExp, err := spanExporter(ctx)
	if err != nil {
		return nil, err
	}
	if spanExp != nil {
		traceOpts = append(traceOpts, sdktrace.WithBatcher(spanExp))
	}
	metrics, reader, err := metricReader(ctx)
	if err != nil {
		if spanExp != nil {
			_ = spanExp.Shutdown(ctx)
		}
		return nil, err
	}
	prom, err := newPrometheus()
	if err != nil {
		return nil, err
	}
	meterOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(prom.reader)}
	if reader != nil {
		meterOpts = append(meterOpts, sdkmetric.WithReader(reader))
	}
	t := &Telemetry{tracer: sdktrace.NewTracerProvider(traceOpts...), meter: sdkmetric.NewMeterProvider(meterOpts...),
		traces: traces, metrics: metrics, resource: res}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("opentelemetry", slog.String("error", err.Error()))
	}))
	otel.SetTracerProvider(t.tracer)
	otel.SetMeterProvider(t.meter)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	serve(prom)
	logger.Debug("telemetry set up", slog.String("service", t.ServiceName()),
		slog.String("traces", orNone(traces)), slog.String("metrics", "prometheus /metrics"+plus(metrics)))
	return t, nil
}

// Shutdown flushes what the exporters hold and stops them, within ctx. The global providers
// stay installed but record nothing more.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	return errors.Join(t.tracer.Shutdown(ctx), t.meter.Shutdown(ctx))
}

// TracesExporter names the exporter spans go to ("otlp", "console"), or "" when none.
func (t *Telemetry) TracesExporter() string { return t.traces }

// MetricsExporter names the exporter metrics are pushed to besides /metrics ("otlp",
// "console"), or "" when none.
func (t *Telemetry) MetricsExporter() string { return t.metrics }

// ServiceName is the service.name of the resource.
func (t *Telemetry) ServiceName() string {
	v, _ := t.resource.Set().Value("service.name")
	return v.AsString()
}

// newResource names the service; the environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES)
// overrides opts, being detected last.
func newResource(ctx context.Context, opts Options, logger *slog.Logger) (*resource.Resource, error) {
	name := opts.Service
	if name == "" {
		name = "flow"
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if opts.Version != "" {
		attrs = append(attrs, attribute.String("service.version", opts.Version))
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID(),
		resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry: describing the resource (check OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME): %w", err)
	}
	// A partial resource (a malformed OTEL_RESOURCE_ATTRIBUTES entry) is still usable.
	if err != nil {
		logger.Warn("telemetry: part of the resource was dropped; check OTEL_RESOURCE_ATTRIBUTES", slog.String("error", err.Error()))
	}
	return res, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func plus(s string) string {
	if s == "" {
		return ""
	}
	return " + " + s
}
