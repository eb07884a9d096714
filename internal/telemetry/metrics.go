package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// promState is a Prometheus registry fed by an OpenTelemetry reader, and its handler.
type promState struct {
	reader  sdkmetric.Reader
	handler http.Handler
}

// newPrometheus makes a registry with the Go runtime and process collectors, and an
// OpenTelemetry reader that feeds it.
func newPrometheus() (*promState, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reader, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("telemetry: making the Prometheus exporter: %w", err)
	}
	return &promState{reader: reader, handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})}, nil
}

var (
	// active is what MetricsHandler serves: the registry of the MeterProvider Setup (or
	// MetricsHandler itself) installed, or Prometheus's default registry.
	active atomic.Pointer[http.Handler]
	// fallback is decided once, by the first MetricsHandler before any Setup.
	fallback sync.Once
)

func serve(p *promState) { active.Store(&p.handler) }

// MetricsHandler serves the process's metrics in the Prometheus text format, for GET /metrics.
// Every service mounts it; it always serves the latest Setup's metrics. In a process that did
// not call Setup (a service embedded as a library), the first call decides what it serves:
//   - when nothing set the global MeterProvider yet, it installs one of its own, feeding a
//     Prometheus registry (no OTLP, no TracerProvider): the process's Flow metrics are served
//     whatever the program does later;
//   - when the program set its own MeterProvider, it serves Prometheus's default registry
//     (prometheus.DefaultGatherer), which is where the OpenTelemetry Prometheus exporter
//     registers by default, besides the Go runtime and process metrics.
func MetricsHandler() http.Handler {
	fallback.Do(func() {
		if active.Load() != nil {
			return
		}
		if !globalMeterProviderUnset() {
			h := promhttp.Handler()
			active.CompareAndSwap(nil, &h)
			return
		}
		p, err := newPrometheus()
		if err != nil {
			slog.Default().Warn("telemetry: serving the default Prometheus registry", slog.String("error", err.Error()))
			h := promhttp.Handler()
			active.CompareAndSwap(nil, &h)
			return
		}
		res, err := newResource(context.Background(), Options{}, slog.Default())
		if err != nil {
			res = nil
		}
		opts := []sdkmetric.Option{sdkmetric.WithReader(p.reader)}
		if res != nil {
			opts = append(opts, sdkmetric.WithResource(res))
		}
		if active.CompareAndSwap(nil, &p.handler) {
			otel.SetMeterProvider(sdkmetric.NewMeterProvider(opts...))
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*active.Load()).ServeHTTP(w, r) })
}

// globalMeterProviderUnset reports whether otel.GetMeterProvider is still OpenTelemetry's
// default, the delegating provider that nothing replaced yet.
func globalMeterProviderUnset() bool {
	return reflect.TypeOf(otel.GetMeterProvider()).String() == "*global.meterProvider"
}
