package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

var quiet = natstest.Logger()

const token = "s3cret-token"

// gate creates the hook "cb", then waits for the signal "go"; whichever arrives first ends it
// with its payload.
func gate(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
	if p := ctx.Hook("cb"); p != nil {
		return ctx.Complete(p), nil
	}
	if p := ctx.Signal("go"); p != nil {
		return ctx.Complete(p), nil
	}
	if ctx.Snapshot().Hooks["cb"] == nil {
		return ctx.CreateHook("cb", nil), nil
	}
	return ctx.AwaitSignal("go", "go"), nil
}

type bundle struct {
	srv    *natsserver.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	in     *ingress.Service
	client *flow.Client
	base   string
}

// setup starts a server with Flow's streams, a history service, the ingress (cfg, on a free
// HTTP port unless cfg names one), a worker serving "gate" and a scheduler, all stopped when t
// ends, and dials a client.
func setup(t *testing.T, cfg ingress.Config) *bundle {
	t.Helper()
	b, _ := setupParts(t, cfg, parts{})
	return b
}

// parts says what setupParts starts besides the server and the ingress.
type parts struct {
	noHistory, noScheduler bool
	// register registers the worker's workflows; nil registers "gate".
	register func(*flow.Registry)
}

// setupParts is setup with the parts p names, and also returns the worker.
func setupParts(t *testing.T, cfg ingress.Config, p parts) (*bundle, *worker.Worker) {
	t.Helper()
	srv := natstest.RunJetStream(t)
	if !p.noHistory {
		h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet})
		require.NoError(t, err)
		require.NoError(t, h.Start(t.Context()))
		t.Cleanup(func() { _ = h.Stop() })
	}
	cfg.Conn, cfg.Logger = natstest.Connect(t, srv), quiet
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	in, err := ingress.New(cfg)
	require.NoError(t, err)
	require.NoError(t, in.Start(t.Context()))
	t.Cleanup(func() { _ = in.Stop() })
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	if p.register != nil {
		p.register(reg)
	} else {
		flow.RegisterWorkflow(reg, "gate", gate)
	}
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	if !p.noScheduler {
		s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: quiet})
		require.NoError(t, err)
		require.NoError(t, s.Start(t.Context()))
		t.Cleanup(func() { _ = s.Stop() })
	}
	nc := natstest.Connect(t, srv)
	c, err := flow.NewClient(t.Context(), nc, nil)
	require.NoError(t, err)
	return &bundle{srv: srv, nc: nc, js: natstest.JetStream(t, srv), in: in, client: c, base: "http://" + in.HTTPAddr()}, w
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, 5*time.Millisecond, what)
}

// hookToken waits for run runID to create its hook and returns its token.
func (b *bundle) hookToken(t *testing.T, runID string) string {
	var tok string
	waitFor(t, "the hook is created", func() bool {
		s, err := b.client.Secrets().Snapshot(t.Context(), runID)
		if err != nil || s.Hooks["cb"] == nil || s.SignalWaits["go"] == nil {
			return false
		}
		tok = s.Hooks["cb"].Token
		return true
	})
	return tok
}

// historyState is what must not change when an input is refused: the stream's last sequence
// and the bytes of run runID's last commit.
func (b *bundle) historyState(t *testing.T, runID string) (uint64, []byte) {
	t.Helper()
	st, err := b.js.Stream(t.Context(), streams.History)
	require.NoError(t, err)
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	m, err := st.GetLastMsgForSubject(t.Context(), streams.Layout{}.Subject(runID))
	require.NoError(t, err)
	return info.State.LastSeq, m.Data
}

type httpReq struct {
	method, path, contentType, auth string
	headers                         map[string]string
	body                            string
}

func (b *bundle) do(t *testing.T, r httpReq) (int, api.IngressError) {
	t.Helper()
	method := r.method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.base+r.path, strings.NewReader(r.body))
	require.NoError(t, err)
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if r.auth != "" {
		req.Header.Set("Authorization", r.auth)
	}
	for k, v := range r.headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var e api.IngressError
	if resp.StatusCode >= 400 {
		require.NoError(t, json.Unmarshal(body, &e), "an error body is JSON {code, message}: %s", body)
		require.NotEmpty(t, e.Message)
	}
	return resp.StatusCode, e
}

// TestBadInputIsRefusedAndAppendsNothing sends every kind of bad input to every route and
// subject: each gets a 4xx with a JSON {code, message}, and the histories stay byte-identical.
func TestBadInputIsRefusedAndAppendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{Tokens: []string{token}, MaxBodyBytes: 1024})
	ctx := t.Context()
	waiting, err := b.client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "waiting"})
	require.NoError(t, err)
	tok := b.hookToken(t, waiting)
	_, err = b.client.Signal(ctx, waiting, "other", map[string]int{"a": 1}, &flow.DeliveryOptions{DeliveryID: "k1"})
	require.NoError(t, err)
	ended, err := b.client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "ended"})
	require.NoError(t, err)
	endedTok := b.hookToken(t, ended)
	_, err = b.client.Signal(ctx, ended, "go", "done", nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Result(ctx, ended, nil))

	bearer := "Bearer " + token
	big := `"` + strings.Repeat("x", 2000) + `"`
	ceBinary := map[string]string{"ce-specversion": "1.0", "ce-id": "e1", "ce-source": "test", "ce-type": "t"}
	for _, tt := range []struct {
		name   string
		req    httpReq
		status int
		code   api.IngressCode
	}{
		{"StartMalformedJSON", httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", auth: bearer, body: `{"input":`}, 400, api.CodeInvalidJSON},
		{"StartWrongContentType", httpReq{path: "/v1/workflows/gate/runs", contentType: "text/plain", auth: bearer, body: `{}`}, 415, api.CodeMediaType},
		{"StartNoContentType", httpReq{path: "/v1/workflows/gate/runs", auth: bearer, body: `{}`}, 415, api.CodeMediaType},
		{"StartTooLarge", httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", auth: bearer, body: `{"input":` + big + `}`}, 413, api.CodeTooLarge},
		{"StartUnknownField", httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", auth: bearer, body: `{"inptu":1}`}, 400, api.CodeInvalidRequest},
		{"StartInvalidDefinition", httpReq{path: "/v1/workflows/ga*te/runs", contentType: "application/json", auth: bearer, body: `{}`}, 400, api.CodeInvalidName},
		{"StartUnknownDefinition", httpReq{path: "/v1/workflows/nope/runs", contentType: "application/json", auth: bearer, body: `{}`}, 409, api.CodeNoWorker},
		{"StartInvalidRunID", httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", auth: bearer, body: `{"run_id":"a b"}`}, 400, api.CodeInvalidName},
		{"StartTakenRunID", httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", auth: bearer, body: `{"run_id":"waiting","input":1}`}, 409, api.CodeRunExists},
		{"StartNoAuth", httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", body: `{}`}, 401, api.CodeUnauthorized},
		{"StartWrongAuth", httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", auth: "Bearer nope", body: `{}`}, 401, api.CodeUnauthorized},
		{"StartNotBearer", httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", auth: "Basic " + token, body: `{}`}, 401, api.CodeUnauthorized},
		{"SignalUnknownRun", httpReq{path: "/v1/runs/nope/signals/go", contentType: "application/json", auth: bearer, body: `1`}, 404, api.CodeRunNotFound},
		{"SignalEndedRun", httpReq{path: "/v1/runs/ended/signals/go", contentType: "application/json", auth: bearer, body: `1`}, 409, api.CodeRunEnded},
		{"SignalInvalidName", httpReq{path: "/v1/runs/waiting/signals/g*o", contentType: "application/json", auth: bearer, body: `1`}, 400, api.CodeInvalidName},
		{"SignalInvalidRunID", httpReq{path: "/v1/runs/wa*iting/signals/go", contentType: "application/json", auth: bearer, body: `1`}, 400, api.CodeInvalidName},
		{"SignalMalformedJSON", httpReq{path: "/v1/runs/waiting/signals/go", contentType: "application/json", auth: bearer, body: `{`}, 400, api.CodeInvalidJSON},
		{"SignalTooLarge", httpReq{path: "/v1/runs/waiting/signals/go", contentType: "application/json", auth: bearer, body: big}, 413, api.CodeTooLarge},
		{"SignalNoAuth", httpReq{path: "/v1/runs/waiting/signals/go", contentType: "application/json", body: `1`}, 401, api.CodeUnauthorized},
		{"SignalDeliveryConflict", httpReq{path: "/v1/runs/waiting/signals/other", contentType: "application/json", auth: bearer, body: `{"a":2}`,
			headers: map[string]string{"Idempotency-Key": "k1"}}, 409, api.CodeDeliveryConflict},
		{"SignalBatchCloudEvents", httpReq{path: "/v1/runs/waiting/signals/go", contentType: "application/cloudevents-batch+json", auth: bearer, body: `[]`}, 415, api.CodeMediaType},
		{"SignalCloudEventNotJSON", httpReq{path: "/v1/runs/waiting/signals/go", contentType: "text/plain", auth: bearer, body: `hello`, headers: ceBinary}, 415, api.CodeMediaType},
		{"SignalCloudEventInvalid", httpReq{path: "/v1/runs/waiting/signals/go", contentType: "application/cloudevents+json", auth: bearer,
			body: `{"specversion":"1.0","source":"test","type":"t","data":1}`}, 400, api.CodeInvalidEvent},
		{"HookUnknownToken", httpReq{path: "/v1/hooks/nope", contentType: "application/json", body: `1`}, 404, api.CodeHookNotFound},
		{"HookMalformedJSON", httpReq{path: "/v1/hooks/" + tok, contentType: "application/json", body: `{"a"`}, 400, api.CodeInvalidJSON},
		{"HookWrongContentType", httpReq{path: "/v1/hooks/" + tok, contentType: "application/xml", body: `<a/>`}, 415, api.CodeMediaType},
		{"HookTooLarge", httpReq{path: "/v1/hooks/" + tok, contentType: "application/json", body: big}, 413, api.CodeTooLarge},
		{"HookEndedRun", httpReq{path: "/v1/hooks/" + endedTok, contentType: "application/json", body: `1`}, 409, api.CodeRunEnded},
		{"CancelUnknownRun", httpReq{path: "/v1/runs/nope/cancel", auth: bearer, contentType: "application/json"}, 404, api.CodeRunNotFound},
		{"CancelMalformedJSON", httpReq{path: "/v1/runs/waiting/cancel", contentType: "application/json", auth: bearer, body: `{"reason":`}, 400, api.CodeInvalidJSON},
		{"CancelUnknownField", httpReq{path: "/v1/runs/waiting/cancel", contentType: "application/json", auth: bearer, body: `{"why":"x"}`}, 400, api.CodeInvalidRequest},
		{"CancelEndedRun", httpReq{path: "/v1/runs/ended/cancel", auth: bearer, contentType: "application/json"}, 409, api.CodeRunEnded},
		{"CancelNoAuth", httpReq{path: "/v1/runs/waiting/cancel"}, 401, api.CodeUnauthorized},
		{"TerminateEndedRun", httpReq{path: "/v1/runs/ended/terminate", auth: bearer, contentType: "application/json"}, 409, api.CodeRunEnded},
		{"TerminateNoAuth", httpReq{path: "/v1/runs/waiting/terminate"}, 401, api.CodeUnauthorized},
		{"WrongMethod", httpReq{method: http.MethodGet, path: "/v1/runs/waiting/cancel", auth: bearer}, 405, api.CodeMethodNotAllowed},
		{"UnknownRoute", httpReq{path: "/v1/nothing", auth: bearer}, 404, api.CodeRouteNotFound},
	} {
		t.Run("HTTP/"+tt.name, func(t *testing.T) {
			lastSeq, waitingBytes := b.historyState(t, waiting)
			_, endedBytes := b.historyState(t, ended)
			status, e := b.do(t, tt.req)
			require.Equal(t, tt.status, status, "%s", e.Message)
			require.Equal(t, tt.code, e.Code, "%s", e.Message)
			after, waitingAfter := b.historyState(t, waiting)
			_, endedAfter := b.historyState(t, ended)
			require.Equal(t, lastSeq, after, "nothing appended to any run")
			require.Equal(t, waitingBytes, waitingAfter)
			require.Equal(t, endedBytes, endedAfter)
		})
	}

	// The same over NATS, by request/reply; a rejected plain publish goes to the dead letters.
	dead, err := b.nc.SubscribeSync(api.DeadLetterPrefix + ">")
	require.NoError(t, err)
	require.NoError(t, b.nc.Flush())
	binary := func(id, contentType string, data []byte) nats.Header {
		return nats.Header{"ce-specversion": {"1.0"}, "ce-id": {id}, "ce-source": {"test"}, "ce-type": {"t"}, "ce-datacontenttype": {contentType}}
	}
	for _, tt := range []struct {
		name    string
		subject string
		header  nats.Header
		data    string
		status  int
		code    api.IngressCode
	}{
		{"StartMalformedJSON", api.StartSubject("gate"), nil, `{"input":`, 400, api.CodeInvalidJSON},
		{"StartUnknownDefinition", api.StartSubject("nope"), nil, `{}`, 409, api.CodeNoWorker},
		{"StartTooLarge", api.StartSubject("gate"), nil, `{"input":` + big + `}`, 413, api.CodeTooLarge},
		{"StartWrongContentType", api.StartSubject("gate"), nats.Header{"Content-Type": {"text/plain"}}, `{}`, 415, api.CodeMediaType},
		{"StartCloudEventNotJSON", api.StartSubject("gate"), binary("e1", "text/plain", nil), `hi`, 415, api.CodeMediaType},
		{"StartCloudEventInvalidRunID", api.StartSubject("gate"), func() nats.Header {
			h := binary("e2", "application/json", nil)
			h.Set("ce-"+api.ExtRunID, "a b")
			return h
		}(), `1`, 400, api.CodeInvalidName},
		{"SignalUnknownRun", api.SignalSubject("nope", "go"), nil, `1`, 404, api.CodeRunNotFound},
		{"SignalEndedRun", api.SignalSubject("ended", "go"), nil, `1`, 409, api.CodeRunEnded},
		{"SignalNoName", api.SubjectSignalPrefix + "waiting", nil, `1`, 400, api.CodeInvalidName},
		{"SignalMalformedJSON", api.SignalSubject("waiting", "go"), nil, `{`, 400, api.CodeInvalidJSON},
		{"SignalDeliveryConflict", api.SignalSubject("waiting", "other"), binary("k1", "application/json", nil), `{"a":3}`, 409, api.CodeDeliveryConflict},
		{"SignalStructuredInvalid", api.SignalSubject("waiting", "go"), nil, `{"specversion":"1.0","id":"x","type":"t","data":1}`, 400, api.CodeInvalidEvent},
		{"HookUnknownToken", api.HookSubject("nope"), nil, `1`, 404, api.CodeHookNotFound},
		{"HookMalformedJSON", api.HookSubject(tok), nil, `nope`, 400, api.CodeInvalidJSON},
		{"HookEndedRun", api.HookSubject(endedTok), nil, `1`, 409, api.CodeRunEnded},
		{"CancelUnknownRun", api.CancelSubject("nope"), nil, ``, 404, api.CodeRunNotFound},
		{"CancelMalformedJSON", api.CancelSubject("waiting"), nil, `{"reason"`, 400, api.CodeInvalidJSON},
		{"TerminateEndedRun", api.TerminateSubject("ended"), nil, ``, 409, api.CodeRunEnded},
		{"UnknownKind", api.IngressPrefix + "frobnicate.waiting", nil, ``, 404, api.CodeRouteNotFound},
	} {
		t.Run("NATS/"+tt.name, func(t *testing.T) {
			lastSeq, waitingBytes := b.historyState(t, waiting)
			msg := &nats.Msg{Subject: tt.subject, Header: tt.header, Data: []byte(tt.data)}
			if msg.Header == nil {
				msg.Header = nats.Header{}
			}
			reply, err := b.nc.RequestMsg(msg, 10*time.Second)
			require.NoError(t, err)
			require.Equal(t, string(tt.code), reply.Header.Get(api.HeaderErrorCode), "%s", reply.Data)
			status, err := strconv.Atoi(reply.Header.Get(api.HeaderStatus))
			require.NoError(t, err)
			require.Equal(t, tt.status, status)
			var e api.IngressError
			require.NoError(t, json.Unmarshal(reply.Data, &e))
			require.Equal(t, tt.code, e.Code)
			require.NotEmpty(t, e.Message)

			// Published without a reply subject, it is dead-lettered with its reason.
			msg.Reply = ""
			require.NoError(t, b.nc.PublishMsg(msg))
			dl, err := dead.NextMsg(10 * time.Second)
			require.NoError(t, err)
			require.Equal(t, string(tt.code), dl.Header.Get(api.HeaderErrorCode))
			require.Equal(t, tt.subject, dl.Header.Get(api.HeaderOriginalSubject))
			require.NotEmpty(t, dl.Header.Get(api.HeaderErrorMessage))
			require.Equal(t, tt.data, string(dl.Data))

			after, waitingAfter := b.historyState(t, waiting)
			require.Equal(t, lastSeq, after, "nothing appended to any run")
			require.Equal(t, waitingBytes, waitingAfter)
		})
	}

	// The dead letters are kept in a stream.
	st, err := b.js.Stream(ctx, streams.DeadLetter)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, info.State.Msgs, uint64(19))
}

// TestInputsOverHTTPAndNATS drives runs from outside: starts, signals, hook deliveries and
// cancels over HTTP (plain JSON and CloudEvents) and over NATS (CloudEvents built with the SDK,
// as a user's service would, and plain JSON); retried deliveries are applied once.
func TestInputsOverHTTPAndNATS(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{})
	ctx := t.Context()
	result := func(runID string) string {
		var out string
		require.NoError(t, b.client.Result(ctx, runID, &out))
		return out
	}

	// HTTP, plain JSON: start twice (idempotent), signal twice with one key.
	status, _ := b.do(t, httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", body: `{"run_id":"h1"}`})
	require.Equal(t, http.StatusCreated, status)
	status, _ = b.do(t, httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", body: `{"run_id":"h1"}`})
	require.Equal(t, http.StatusOK, status, "starting it again returns the run")
	b.hookToken(t, "h1")
	for range 2 {
		status, _ = b.do(t, httpReq{path: "/v1/runs/h1/signals/go", contentType: "application/json", body: `"over http"`, headers: map[string]string{"Idempotency-Key": "once"}})
		require.Equal(t, http.StatusAccepted, status)
	}
	require.Equal(t, "over http", result("h1"))
	hist, err := b.client.History(ctx, "h1", 0)
	require.NoError(t, err)
	require.Equal(t, 1, count(hist, "signal.received"), "a retried delivery is applied once")

	// HTTP, a CloudEvent in structured mode delivered to the hook.
	status, _ = b.do(t, httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", body: `{"run_id":"h2"}`})
	require.Equal(t, http.StatusCreated, status)
	tok := b.hookToken(t, "h2")
	status, e := b.do(t, httpReq{path: "/v1/hooks/" + tok, contentType: "application/cloudevents+json",
		body: `{"specversion":"1.0","id":"pay-1","source":"psp","type":"payment.captured","datacontenttype":"application/json","data":"captured"}`})
	require.Equal(t, http.StatusAccepted, status, e.Message)
	require.Equal(t, "captured", result("h2"))

	// HTTP cancel, with a reason.
	status, _ = b.do(t, httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", body: `{"run_id":"h3"}`})
	require.Equal(t, http.StatusCreated, status)
	status, _ = b.do(t, httpReq{path: "/v1/runs/h3/cancel", contentType: "application/json", body: `{"reason":"changed my mind"}`})
	require.Equal(t, http.StatusAccepted, status)
	var runErr *flow.RunError
	require.ErrorAs(t, b.client.Result(ctx, "h3", nil), &runErr)
	require.Equal(t, flow.StatusCancelled, runErr.Status)

	// NATS: a user's service publishing CloudEvents built with the SDK.
	send := func(subject, id string, data any, ext map[string]string) *nats.Msg {
		ev := ce.New()
		ev.SetID(id)
		ev.SetSource("orders-service")
		ev.SetType("order.approved")
		for k, v := range ext {
			ev.SetExtension(k, v)
		}
		require.NoError(t, ev.SetData(ce.ApplicationJSON, data))
		var body bytes.Buffer
		h, err := cenats.WriteMsg(ctx, binding.ToMessage(&ev), &body)
		require.NoError(t, err)
		reply, err := b.nc.RequestMsg(&nats.Msg{Subject: subject, Header: h, Data: body.Bytes()}, 10*time.Second)
		require.NoError(t, err)
		require.Empty(t, reply.Header.Get(api.HeaderErrorCode), "%s", reply.Data)
		return reply
	}
	send(api.StartSubject("gate"), "n1", nil, map[string]string{api.ExtRunID: "n1"})
	b.hookToken(t, "n1")
	send(api.SignalSubject("n1", "go"), "approved-1", "over nats", nil)
	send(api.SignalSubject("n1", "go"), "approved-1", "over nats", nil)
	require.Equal(t, "over nats", result("n1"))
	hist, err = b.client.History(ctx, "n1", 0)
	require.NoError(t, err)
	require.Equal(t, 1, count(hist, "signal.received"))

	// A start without flowrunid takes the event's id as the run ID: a redelivery starts it once.
	reply := send(api.StartSubject("gate"), "order-77", nil, nil)
	var resp api.InputResponse
	require.NoError(t, json.Unmarshal(reply.Data, &resp))
	require.Equal(t, "order-77", resp.RunID)
	send(api.StartSubject("gate"), "order-77", nil, nil)
	tok = b.hookToken(t, "order-77")
	send(api.HookSubject(tok), "cb-1", "hooked over nats", nil)
	require.Equal(t, "hooked over nats", result("order-77"))

	// NATS, plain JSON with Nats-Msg-Id as the delivery ID; a plain publish (no reply) too.
	send(api.StartSubject("gate"), "p1", nil, map[string]string{api.ExtRunID: "p1"})
	b.hookToken(t, "p1")
	require.NoError(t, b.nc.PublishMsg(&nats.Msg{Subject: api.CancelSubject("p1"), Header: nats.Header{}, Data: []byte(`{"reason":"fire and forget"}`)}))
	require.ErrorAs(t, b.client.Result(ctx, "p1", nil), &runErr)
	require.Equal(t, flow.StatusCancelled, runErr.Status)

	// The Go client's hook delivery, and a conflicting redelivery.
	_, err = b.client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "c1"})
	require.NoError(t, err)
	tok = b.hookToken(t, "c1")
	run, err := b.client.DeliverHook(ctx, tok, "from the client", &flow.DeliveryOptions{DeliveryID: "d1"})
	require.NoError(t, err)
	require.Equal(t, "c1", run)
	_, err = b.client.DeliverHook(ctx, tok, "from the client", &flow.DeliveryOptions{DeliveryID: "d1"})
	require.NoError(t, err, "the same delivery again is accepted")
	require.Equal(t, "from the client", result("c1"))
	_, err = b.client.DeliverHook(ctx, tok, "something else", &flow.DeliveryOptions{DeliveryID: "d1"})
	require.ErrorIs(t, err, flow.ErrDeliveryConflict)

	// The OpenAPI document is served and describes every route.
	resp2, err := http.Get(b.base + "/v1/openapi.json")
	require.NoError(t, err)
	defer resp2.Body.Close()
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	require.NoError(t, json.NewDecoder(resp2.Body).Decode(&doc))
	require.Equal(t, "3.1.0", doc.OpenAPI)
	for _, p := range []string{"/v1/workflows/{definition}/runs", "/v1/runs/{run}/signals/{name}", "/v1/hooks/{token}", "/v1/runs/{run}/cancel", "/v1/runs/{run}/terminate"} {
		require.Contains(t, doc.Paths[p], "post", p)
	}
}

func count(hist []event.Envelope, t string) int {
	n := 0
	for _, e := range hist {
		if string(e.Type()) == t {
			n++
		}
	}
	return n
}

// Without tokens the ingress listens on loopback only; a tokens file must exist.
func TestAuthenticationConfig(t *testing.T) {
	t.Parallel()
	_, err := ingress.New(ingress.Config{HTTPAddr: "0.0.0.0:0"})
	require.ErrorContains(t, err, "FLOW_INGRESS_TOKENS", "no tokens on a public address is refused")
	_, err = ingress.New(ingress.Config{HTTPAddr: "0.0.0.0:0", AllowAnonymous: true})
	require.NoError(t, err)
	_, err = ingress.New(ingress.Config{TokensFile: t.TempDir() + "/missing"})
	require.ErrorContains(t, err, "tokens file")
}

// Bearer tokens come from a file too, read again when it changes (a rotated secret).
func TestTokensFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(file, []byte("# rotated monthly\nfirst-token\n"), 0o600))
	b := setup(t, ingress.Config{TokensFile: file})
	// Cancelling a run that does not exist: 404 once the token is accepted, 401 before.
	cancel := func(token string) int {
		status, _ := b.do(t, httpReq{path: "/v1/runs/nope/cancel", contentType: "application/json", auth: "Bearer " + token})
		return status
	}
	require.Equal(t, http.StatusNotFound, cancel("first-token"))
	require.Equal(t, http.StatusUnauthorized, cancel("second-token"))

	require.NoError(t, os.WriteFile(file, []byte("second-token\n"), 0o600))
	waitFor(t, "the new file is read", func() bool { return cancel("second-token") == http.StatusNotFound })
	require.Equal(t, http.StatusUnauthorized, cancel("first-token"))
}
