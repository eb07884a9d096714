package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	collmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/telemetry"
)

// clearOTEL unsets the variables that would make Setup export.
func clearOTEL(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(v, "")
	}
}

func setup(t *testing.T, opts telemetry.Options) *telemetry.Telemetry {
	t.Helper()
	opts.Logger = natstest.Logger()
	tel, err := telemetry.Setup(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel
}

func scrape(t *testing.T) (string, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	telemetry.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String(), rec.Header().Get("Content-Type")
}

func TestNoExporterUnlessAsked(t *testing.T) {
	clearOTEL(t)
	tel := setup(t, telemetry.Options{Service: "flow-test", Version: "1.2.3"})
	require.Empty(t, tel.TracesExporter())
	require.Empty(t, tel.MetricsExporter())
	require.Equal(t, "flow-test", tel.ServiceName())

	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_METRICS_EXPORTER", "prometheus")
	tel = setup(t, telemetry.Options{Service: "flow-test"})
	require.Empty(t, tel.TracesExporter(), "none turns traces off whatever the endpoint")
	require.Empty(t, tel.MetricsExporter(), "prometheus is /metrics, nothing more")

	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	_, err := telemetry.Setup(context.Background(), telemetry.Options{})
	require.ErrorContains(t, err, "OTEL_TRACES_EXPORTER")
}

func TestSetupSetsPropagatorAndResource(t *testing.T) {
	clearOTEL(t)
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	tel := setup(t, telemetry.Options{Service: "flow-test"})
	require.Equal(t, "from-env", tel.ServiceName(), "OTEL_SERVICE_NAME wins over Options.Service")
	fields := otel.GetTextMapPropagator().Fields()
	require.Contains(t, fields, "traceparent")
	require.Contains(t, fields, "baggage")
	carrier := propagation.MapCarrier{}
	ctx, span := otel.Tracer("github.com/flowrun/flow").Start(context.Background(), "sampled")
	defer span.End()
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, carrier["traceparent"], "spans are recorded and sampled")
}

func TestMetricsServeCounters(t *testing.T) {
	clearOTEL(t)
	setup(t, telemetry.Options{Service: "flow-test"})
	c, err := otel.Meter("github.com/flowrun/flow").Int64Counter("flow.test.things")
	require.NoError(t, err)
	c.Add(context.Background(), 3)
	body, ct := scrape(t)
	require.Contains(t, ct, "text/plain")
	require.Regexp(t, regexp.MustCompile(`(?m)^flow_test_things_total\{[^}]*\} 3$`), body)
	require.Contains(t, body, "go_goroutines")
	require.Regexp(t, `target_info\{[^}]*service_name="flow-test"`, body)
}

// otlpReceiver is an OTLP/HTTP endpoint recording what it receives.
type otlpReceiver struct {
	mu      sync.Mutex
	traces  []*colltrace.ExportTraceServiceRequest
	metrics []*collmetric.ExportMetricsServiceRequest
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var resp proto.Message
	switch r.URL.Path {
	case "/v1/traces":
		var req colltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		o.traces = append(o.traces, &req)
		resp = &colltrace.ExportTraceServiceResponse{}
	case "/v1/metrics":
		var req collmetric.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		o.metrics = append(o.metrics, &req)
		resp = &collmetric.ExportMetricsServiceResponse{}
	default:
		http.NotFound(w, r)
		return
	}
	b, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func TestOTLPOverHTTPWhenAsked(t *testing.T) {
	clearOTEL(t)
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "flow-worker", Version: "9.9.9", Logger: natstest.Logger()})
	require.NoError(t, err)
	require.Equal(t, "otlp", tel.TracesExporter())
	require.Equal(t, "otlp", tel.MetricsExporter())

	ctx, span := otel.Tracer("github.com/flowrun/flow").Start(context.Background(), "test.span")
	span.End()
	c, err := otel.Meter("github.com/flowrun/flow").Int64Counter("flow.test.exported")
	require.NoError(t, err)
	c.Add(ctx, 5)
	// Shutdown flushes both exporters: the requests have arrived when it returns.
	require.NoError(t, tel.Shutdown(context.Background()))

	recv.mu.Lock()
	defer recv.mu.Unlock()
	require.NotEmpty(t, recv.traces, "no OTLP trace request arrived")
	rs := recv.traces[0].ResourceSpans[0]
	attrs := map[string]string{}
	for _, kv := range rs.Resource.Attributes {
		attrs[kv.Key] = kv.Value.GetStringValue()
	}
	require.Equal(t, "flow-worker", attrs["service.name"])
	require.Equal(t, "9.9.9", attrs["service.version"])
	require.Equal(t, "test.span", rs.ScopeSpans[0].Spans[0].Name)

	require.NotEmpty(t, recv.metrics, "no OTLP metrics request arrived")
	var names []string
	for _, rm := range recv.metrics {
		for _, sm := range rm.ResourceMetrics {
			for _, s := range sm.ScopeMetrics {
				for _, m := range s.Metrics {
					names = append(names, m.Name)
				}
			}
		}
	}
	require.Contains(t, names, "flow.test.exported")
}

// TestMetricsWithoutSetup runs a child test process that never calls Setup, as a program that
// embeds a service does.
func TestMetricsWithoutSetup(t *testing.T) {
	if os.Getenv("FLOW_TELEMETRY_CHILD") == "1" {
		t.Skip("the child runs TestNoSetupChild")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoSetupChild$", "-test.v")
	cmd.Env = append(os.Environ(), "FLOW_TELEMETRY_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestNoSetupChild")
}

func TestNoSetupChild(t *testing.T) {
	if os.Getenv("FLOW_TELEMETRY_CHILD") != "1" {
		t.Skip("run by TestMetricsWithoutSetup in a process of its own")
	}
	// An instrument made before anything set a MeterProvider, as package-level instruments are.
	c, err := otel.Meter("github.com/flowrun/flow").Int64Counter("flow.test.early")
	require.NoError(t, err)
	h := telemetry.MetricsHandler()
	c.Add(context.Background(), 7)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Regexp(t, `(?m)^flow_test_early_total\{[^}]*\} 7$`, rec.Body.String())

	// A Setup after that takes over the same handler.
	clearOTEL(t)
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "flow-after", Logger: natstest.Logger()})
	require.NoError(t, err)
	defer func() { _ = tel.Shutdown(context.Background()) }()
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Regexp(t, `target_info\{[^}]*service_name="flow-after"`, rec.Body.String())
}
