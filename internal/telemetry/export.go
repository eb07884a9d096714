package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// exporterName is the exporter the environment asks for on one signal: the value of the
// signal's OTEL_*_EXPORTER variable, else "otlp" when an OTLP endpoint for it is set, else ""
// (none). "none" is "".
func exporterName(exporterVar, signalEndpointVar string) string {
	name := strings.TrimSpace(os.Getenv(exporterVar))
	switch {
	case name == "none":
		return ""
	case name != "":
		return name
	case os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv(signalEndpointVar) != "":
		return "otlp"
	}
	return ""
}

// spanExporter is the span exporter the environment asks for, or nil.
func spanExporter(ctx context.Context) (string, sdktrace.SpanExporter, error) {
	name := exporterName("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if name == "" {
		return "", nil, nil
	}
	// With OTEL_TRACES_EXPORTER unset autoexport makes an OTLP exporter, as exporterName said.
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("telemetry: making the %q trace exporter: %w (OTEL_TRACES_EXPORTER takes one of otlp, console, none; OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf or grpc)", name, err)
	}
	return name, exp, nil
}

// metricReader is the pushing metric reader the environment asks for, or nil. "prometheus"
// asks for nothing more: MetricsHandler serves the metrics.
func metricReader(ctx context.Context) (string, sdkmetric.Reader, error) {
	name := exporterName("OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
	if name == "" || name == "prometheus" {
		return "", nil, nil
	}
	r, err := autoexport.NewMetricReader(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("telemetry: making the %q metric exporter: %w (OTEL_METRICS_EXPORTER takes one of otlp, console, prometheus, none; OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf or grpc)", name, err)
	}
	return name, r, nil
}
