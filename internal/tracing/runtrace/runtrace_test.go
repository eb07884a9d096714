package runtrace

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// spans receives every span the processes of the test end.
var spans = tracetest.NewInMemoryExporter()

func TestMain(m *testing.M) {
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	os.Exit(m.Run())
}

const testTimeout = 60 * time.Second

// stack is Flow's services on one embedded JetStream, with the ingress's HTTP routes open.
type stack struct {
	srv     *natsserver.Server
	client  *flow.Client
	baseURL string
}

func startStack(t *testing.T) *stack {
	srv := natstest.RunJetStream(t)
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: natstest.Logger()})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: natstest.Logger()})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { _ = s.Stop() })
	in := ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "127.0.0.1:0", Logger: natstest.Logger()})
	client, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	return &stack{srv: srv, client: client, baseURL: "http://" + in.HTTPAddr()}
}

// startWorker starts a worker running the example workflows; stop stops it.
func (s *stack) startWorker(t *testing.T) (stop func()) {
	reg := flow.NewRegistry(nil)
	examples.RegisterWith(reg, examples.Options{Logger: natstest.Logger()})
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, s.srv), Logger: natstest.Logger()}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	}
	t.Cleanup(stop)
	return stop
}

// post sends a JSON input to the ingress as a client whose own span is the request's parent
// (W3C traceparent header), and returns that span's context with the ingress's answer.
func (s *stack) post(t *testing.T, path, body string) (trace.SpanContext, api.InputResponse) {
	ctx, span := otel.Tracer("runtrace-test").Start(t.Context(), "test.client "+path)
	defer span.End()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.baseURL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Less(t, resp.StatusCode, 300, "POST %s: %s", path, b)
	var out api.InputResponse
	require.NoError(t, json.Unmarshal(b, &out))
	return span.SpanContext(), out
}

// signalOverNATS sends a signal as a CloudEvent whose distributed-tracing extension names a
// client span, and returns that span's context.
func (s *stack) signalOverNATS(t *testing.T, runID, name string) trace.SpanContext {
	ctx, span := otel.Tracer("runtrace-test").Start(t.Context(), "test.client signal")
	defer span.End()
	ev := ce.New()
	ev.SetID("signal-" + runID)
	ev.SetSource("runtrace/test")
	ev.SetType("test.signal")
	ev.SetExtension("traceparent", tracing.TraceParent(ctx))
	require.NoError(t, ev.SetData(ce.ApplicationJSON, map[string]string{"by": "ops"}))
	var body bytes.Buffer
	h, err := cenats.WriteMsg(ctx, binding.ToMessage(&ev), &body)
	require.NoError(t, err)
	nc := natstest.Connect(t, s.srv)
	reply, err := nc.RequestMsg(&nats.Msg{Subject: api.IngressPrefix + "signal." + runID + "." + name, Header: h, Data: body.Bytes()}, 10*time.Second)
	require.NoError(t, err)
	require.Empty(t, reply.Header.Get(api.HeaderErrorCode), "%s", reply.Data)
	return span.SpanContext()
}

func attr(s tracetest.SpanStub, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// runSpans returns the exported decision and step spans of run runID.
func runSpans(runID string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if attr(s, engine.AttrRunID).AsString() == runID && (strings.HasPrefix(s.Name, engine.SpanDecide) || strings.HasPrefix(s.Name, engine.SpanStep)) {
			out = append(out, s)
		}
	}
	return out
}

// ingressSpan returns the exported span whose parent is client: the ingress's.
func ingressSpan(t *testing.T, client trace.SpanContext) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans.GetSpans() {
		if s.Parent.SpanID() == client.SpanID() {
			return s
		}
	}
	var all []string
	for _, s := range spans.GetSpans() {
		all = append(all, fmt.Sprintf("%s %s<-%s", s.Name, s.SpanContext.SpanID(), s.Parent.SpanID()))
	}
	t.Fatalf("no ingress span is a child of the client span %s: %s", client.SpanID(), strings.Join(all, ", "))
	return tracetest.SpanStub{}
}

// requireConnected checks that every span of trace traceID names a parent that was exported,
// but the trace's root.
func requireConnected(t *testing.T, traceID trace.TraceID) {
	t.Helper()
	ids := map[trace.SpanID]bool{}
	var trace []tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if s.SpanContext.TraceID() == traceID {
			ids[s.SpanContext.SpanID()] = true
			trace = append(trace, s)
		}
	}
	roots := 0
	for _, s := range trace {
		if !s.Parent.IsValid() {
			roots++
			continue
		}
		require.True(t, ids[s.Parent.SpanID()], "span %q names parent %s, which is not in the trace", s.Name, s.Parent.SpanID())
	}
	require.Equal(t, 1, roots, "the trace has one root, the client's span")
}

// requireNoDuplicateDecisions checks that no decision span (run ID, sequence) was exported twice.
func requireNoDuplicateDecisions(t *testing.T) {
	t.Helper()
	seen := map[string]string{}
	for _, s := range spans.GetSpans() {
		if !strings.HasPrefix(s.Name, engine.SpanDecide) {
			continue
		}
		key := fmt.Sprintf("%s@%d", attr(s, engine.AttrRunID).AsString(), attr(s, engine.AttrSeq).AsInt64())
		require.NotContains(t, seen, key, "decision %s (%s) was traced twice", key, s.Name)
		seen[key] = s.Name
	}
}

func TestOrderRunIsOneTraceAndARestartDuplicatesNoSpan(t *testing.T) {
	st := startStack(t)
	stopWorker := st.startWorker(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	feed, err := natstest.Connect(t, st.srv).SubscribeSync(api.FeedPrefix + "order.>")
	require.NoError(t, err)
	client, started := st.post(t, "/v1/workflows/order/runs", `{"input":{"sku":"sku-1","qty":2}}`)
	var out examples.OrderResult
	require.NoError(t, st.client.Result(ctx, started.RunID, &out))
	in := ingressSpan(t, client)
	require.Equal(t, "POST /v1/workflows/{definition}/runs", in.Name, "the HTTP server span is named for its route")
	require.Equal(t, trace.SpanKindServer, in.SpanKind)

	// run.started recorded the ingress request's span.
	hist, err := st.client.History(ctx, started.RunID, 0)
	require.NoError(t, err)
	rs := hist[0].Payload.(*event.RunStarted)
	require.Equal(t, tracing.Format(in.SpanContext), rs.TraceParent)

	// The event feed carries the run's trace context on every event.
	for range hist {
		m, err := feed.NextMsg(testTimeout)
		require.NoError(t, err)
		require.Equal(t, started.RunID, m.Header.Get("ce-subject"))
		require.Equal(t, rs.TraceParent, m.Header.Get(cloudevent.HeaderTraceParent), "feed event %s", m.Subject)
	}

	// The worker ends a decision's span after its commit, which the client may have seen first.
	require.Eventually(t, func() bool {
		for _, s := range runSpans(started.RunID) {
			if attr(s, engine.AttrDecisionKind).AsString() == "run.completed" {
				return true
			}
		}
		return false
	}, testTimeout, 5*time.Millisecond, "the decision that completes the run is traced")
	run := runSpans(started.RunID)
	var decisions, charges []tracetest.SpanStub
	for _, s := range run {
		require.Equal(t, client.TraceID(), s.SpanContext.TraceID(), "span %q is in another trace than the ingress request", s.Name)
		require.Equal(t, in.SpanContext.SpanID(), s.Parent.SpanID(), "span %q is not a child of the recorded run context", s.Name)
		switch {
		case strings.HasPrefix(s.Name, engine.SpanDecide):
			decisions = append(decisions, s)
			require.Equal(t, "flow.decide order", s.Name)
			require.Equal(t, "order", attr(s, engine.AttrDefinition).AsString())
			require.NotEmpty(t, attr(s, engine.AttrDecisionKind).AsString())
		case s.Name == "flow.step chargePayment":
			charges = append(charges, s)
		}
	}
	// reserve, charge, ship, complete; the charge twice, its first attempt failed.
	require.Len(t, decisions, 4, "decisions: %v", names(decisions))
	require.Equal(t, "run.completed", attr(decisions[len(decisions)-1], engine.AttrDecisionKind).AsString())
	require.Len(t, charges, 2)
	require.Equal(t, int64(1), attr(charges[0], engine.AttrAttempt).AsInt64())
	require.Equal(t, codes.Error, charges[0].Status.Code)
	require.NotEmpty(t, charges[0].Events, "the failed attempt records its error")
	require.Equal(t, int64(2), attr(charges[1], engine.AttrAttempt).AsInt64())
	require.Equal(t, codes.Unset, charges[1].Status.Code)
	requireConnected(t, client.TraceID())

	// A run waiting for a signal is reloaded cold by a new worker, which replays its history:
	// no earlier decision is traced again. The decision that answers the signal links to the
	// ingress request that sent it.
	approver, approval := st.post(t, "/v1/workflows/approval/runs", `{"input":{"who":"ops"}}`)
	require.Eventually(t, func() bool {
		snap, err := st.client.Snapshot(ctx, approval.RunID)
		return err == nil && len(snap.SignalWaits) > 0
	}, testTimeout, 10*time.Millisecond, "the approval run never waited for its signal")
	stopWorker()
	st.startWorker(t)
	sender := st.signalOverNATS(t, approval.RunID, examples.ApprovalSignal)
	var res examples.ApprovalResult
	require.NoError(t, st.client.Result(ctx, approval.RunID, &res))
	require.True(t, res.Approved)
	signalled := ingressSpan(t, sender)
	require.Equal(t, "flow.ingress signal", signalled.Name)

	// The worker ends the span of the decision it committed after the commit, which the client
	// may have seen first: wait for the span.
	var last tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range runSpans(approval.RunID) {
			if attr(s, engine.AttrDecisionKind).AsString() == "run.completed" {
				last = s
				return true
			}
		}
		return false
	}, testTimeout, 5*time.Millisecond, "the decision that completes the run is traced")
	for _, s := range runSpans(approval.RunID) {
		require.Equal(t, approver.TraceID(), s.SpanContext.TraceID(), "span %q is in another trace than the run's start", s.Name)
	}
	require.Len(t, last.Links, 1, "the decision answering the signal links to its ingress request")
	require.Equal(t, signalled.SpanContext.SpanID(), last.Links[0].SpanContext.SpanID())
	requireConnected(t, approver.TraceID())
	requireNoDuplicateDecisions(t)
}

func names(ss []tracetest.SpanStub) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name + "/" + attr(s, engine.AttrDecisionKind).AsString()
	}
	return out
}

// A run started with flow.Client from a traced context joins the caller's trace: the client
// sends its span in the CloudEvent's traceparent and the ingress's span is its child.
func TestClientStartJoinsTheCallersTrace(t *testing.T) {
	st := startStack(t)
	st.startWorker(t)
	ctx, span := otel.Tracer("runtrace-test").Start(t.Context(), "test.client start")
	runID, err := st.client.Start(ctx, "order", map[string]any{"sku": "sku-2", "qty": 1}, &flow.StartOptions{RunID: "traced-start"})
	span.End()
	require.NoError(t, err)
	hist, err := st.client.History(t.Context(), runID, 0)
	require.NoError(t, err)
	rs := hist[0].Payload.(*event.RunStarted)
	recorded, ok := tracing.Parse(rs.TraceParent)
	require.True(t, ok, "run.started records a traceparent, got %q", rs.TraceParent)
	require.Equal(t, span.SpanContext().TraceID(), recorded.TraceID(), "the run is in the caller's trace")
	// The ingress ends its span once it has answered: wait for the export.
	require.Eventually(t, func() bool {
		for _, s := range spans.GetSpans() {
			if s.Parent.SpanID() == span.SpanContext().SpanID() {
				return s.SpanContext.SpanID() == recorded.SpanID()
			}
		}
		return false
	}, testTimeout, 5*time.Millisecond, "run.started records the ingress's span, a child of the caller's")
}
