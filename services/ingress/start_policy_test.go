package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
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
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/ingress"
)

// types returns the event types of run runID's history.
func (b *bundle) types(t *testing.T, runID string) []event.Type {
	t.Helper()
	hist, err := b.client.History(t.Context(), runID, 0)
	require.NoError(t, err)
	out := make([]event.Type, len(hist))
	for i, e := range hist {
		out[i] = e.Type()
	}
	return out
}

// A delayed start is fired by the scheduler through the timer index: until then the run makes
// no decision (no hook is created) and shows as suspended; then it runs.
func TestStartDelayThroughTheScheduler(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{})
	ctx := t.Context()
	before := time.Now()
	id, err := b.client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "later", Delay: 1500 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, "later", id)
	s, err := b.client.Snapshot(ctx, id)
	require.NoError(t, err)
	require.True(t, s.Delayed)
	require.Equal(t, flow.StatusSuspended, s.Status)
	require.WithinDuration(t, before.Add(1500*time.Millisecond), s.NotBefore, time.Second)
	require.Empty(t, s.Hooks, "no decision before the delay fires")
	timers, err := b.js.KeyValue(ctx, streams.TimersBucket)
	require.NoError(t, err)
	waitFor(t, "the start timer is in the index", func() bool {
		_, err := timers.Get(ctx, id+".start.1")
		return err == nil
	})

	tok := b.hookToken(t, id)
	require.False(t, time.Now().Before(s.NotBefore), "the run decided only after its NotBefore")
	_, err = b.client.DeliverHook(ctx, tok, "after the delay", nil)
	require.NoError(t, err)
	var out string
	require.NoError(t, b.client.Result(ctx, id, &out))
	require.Equal(t, "after the delay", out)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeRunDelayFired, event.TypeHookCreated, event.TypeSignalAwaited,
		event.TypeHookReceived, event.TypeRunCompleted}, b.types(t, id))
	waitFor(t, "the fired start timer leaves the index", func() bool {
		_, err := timers.Get(ctx, id+".start.1")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
}

// N debounced starts through the client collapse into one run, started once after the quiet
// period with the latest input; the history service then releases the key.
func TestDebounceThroughTheClient(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{})
	ctx := t.Context()
	const n = 5
	var first string
	for i := range n {
		id, err := b.client.Start(ctx, "gate", i, &flow.StartOptions{RunID: "save-" + strconv.Itoa(i),
			Debounce: &flow.Debounce{Key: "doc-9", Period: time.Second}})
		require.NoError(t, err)
		if i == 0 {
			first = id
		}
		require.Equal(t, first, id, "start %d returns the pending run", i)
	}
	tok := b.hookToken(t, first)
	s, err := b.client.Snapshot(ctx, first)
	require.NoError(t, err)
	require.JSONEq(t, strconv.Itoa(n-1), string(s.Input), "the latest input")
	require.Equal(t, n-1, s.Debounced)
	require.Equal(t, &event.Debounce{Key: "doc-9", Period: event.Duration(time.Second)}, s.StartPolicy.Debounce)
	types := b.types(t, first)
	require.Equal(t, event.TypeRunDelayFired, types[n], "one start, %d run.debounced, then one firing: %v", n-1, types)
	for _, tp := range types[1:n] {
		require.Equal(t, event.TypeRunDebounced, tp)
	}
	_, err = b.client.DeliverHook(ctx, tok, "saved", nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Result(ctx, first, nil))

	keys, err := b.js.KeyValue(ctx, streams.StartKeysBucket)
	require.NoError(t, err)
	waitFor(t, "the debounce key is released", func() bool {
		_, err := keys.Get(ctx, engine.DebounceIndexKey("gate", "doc-9"))
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	id, err := b.client.Start(ctx, "gate", 7, &flow.StartOptions{RunID: "save-7", Debounce: &flow.Debounce{Key: "doc-9", Period: time.Second}})
	require.NoError(t, err)
	require.Equal(t, "save-7", id, "after the run fired, the key starts a new run")
}

// post sends a plain start over HTTP and returns the status and the decoded body.
func (b *bundle) post(t *testing.T, def, body string) (int, api.InputResponse, api.IngressError) {
	t.Helper()
	code, raw := sendJSON[json.RawMessage](t.Context(), t, http.MethodPost, b.base+"/v1/workflows/"+def+"/runs", body)
	var ok api.InputResponse
	var bad api.IngressError
	if code < 400 {
		require.NoError(t, json.Unmarshal(raw, &ok), "%s", raw)
	} else {
		require.NoError(t, json.Unmarshal(raw, &bad), "%s", raw)
	}
	return code, ok, bad
}

// sendJSON sends body, JSON, to url with method, and returns the answer's status and its body
// decoded into a T.
func sendJSON[T any](ctx context.Context, t *testing.T, method, url, body string) (int, T) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out T
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return resp.StatusCode, out
}

// Dedup keys over HTTP, terminate_existing and reuse over NATS CloudEvents, and bad policies
// refused with a 400 that says what was wrong.
func TestStartPoliciesOverTheWire(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{})
	ctx := t.Context()

	// HTTP: a dedup key returns the first run to a start that asks for another run ID.
	status, resp, _ := b.post(t, "gate", `{"run_id":"pay-1","input":1,"dedup_key":"invoice-42","dedup_window":"1h"}`)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, "pay-1", resp.RunID)
	status, resp, _ = b.post(t, "gate", `{"run_id":"pay-2","input":2,"dedup_key":"invoice-42","dedup_window":"1h"}`)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "pay-1", resp.RunID, "the first run of the key")
	require.False(t, resp.Created)
	_, err := b.client.Snapshot(ctx, "pay-2")
	require.ErrorIs(t, err, flow.ErrNotFound)

	for _, c := range []struct{ body, want string }{
		{`{"run_id":"x","on_conflict":"replace"}`, "not one of fail, use_existing, terminate_existing"},
		{`{"run_id":"x","reuse":"maybe"}`, "not one of refuse, allow, allow_failed_only"},
		{`{"run_id":"x","dedup_key":"k"}`, "positive dedup window"},
		{`{"run_id":"x","delay":"soon"}`, "soon"},
		{`{"run_id":"x","debounce":{"key":"k","period":"1s"},"dedup_key":"k","dedup_window":"1s"}`, "not both"},
	} {
		status, _, e := b.post(t, "gate", c.body)
		require.Equal(t, http.StatusBadRequest, status, c.body)
		require.Contains(t, e.Message, c.want, c.body)
	}
	_, err = b.client.Snapshot(ctx, "x")
	require.ErrorIs(t, err, flow.ErrNotFound, "a refused start appends nothing")

	// NATS CloudEvents: terminate_existing replaces an active run; the caller's ID then
	// addresses the new run.
	send := func(id string, ext map[string]string) (api.InputResponse, string) {
		data := "in-" + id
		ev := ce.New()
		ev.SetID(id)
		ev.SetSource("orders-service")
		ev.SetType("order.placed")
		for k, v := range ext {
			ev.SetExtension(k, v)
		}
		require.NoError(t, ev.SetData(ce.ApplicationJSON, data))
		var body bytes.Buffer
		h, err := cenats.WriteMsg(ctx, binding.ToMessage(&ev), &body)
		require.NoError(t, err)
		reply, err := b.nc.RequestMsg(&nats.Msg{Subject: api.StartSubject("gate"), Header: h, Data: body.Bytes()}, 10*time.Second)
		require.NoError(t, err)
		var r api.InputResponse
		if code := reply.Header.Get(api.HeaderErrorCode); code != "" {
			return r, code
		}
		require.NoError(t, json.Unmarshal(reply.Data, &r))
		return r, ""
	}
	r, code := send("ev-1", map[string]string{api.ExtRunID: "order-5"})
	require.Empty(t, code)
	require.Equal(t, "order-5", r.RunID)
	b.hookToken(t, "order-5")
	_, code = send("ev-2", map[string]string{api.ExtRunID: "order-5", api.ExtOnConflict: "fail"})
	require.Equal(t, string(api.CodeRunExists), code, "another start of an active run's ID is refused")
	r, code = send("ev-3", map[string]string{api.ExtRunID: "order-5", api.ExtOnConflict: "use_existing"})
	require.Empty(t, code)
	require.Equal(t, "order-5", r.RunID)
	require.False(t, r.Created)
	r, code = send("ev-4", map[string]string{api.ExtRunID: "order-5", api.ExtOnConflict: "terminate_existing"})
	require.Empty(t, code)
	require.Equal(t, "order-5=_1", r.RunID)
	require.True(t, r.Created)
	r, code = send("ev-4", map[string]string{api.ExtRunID: "order-5", api.ExtOnConflict: "terminate_existing"})
	require.Empty(t, code)
	require.Equal(t, "order-5=_1", r.RunID, "a redelivery of the same event is answered with the run it started")
	require.False(t, r.Created)
	old, err := b.client.Snapshot(ctx, "order-5")
	require.NoError(t, err)
	require.Equal(t, flow.StatusFailed, old.Status)
	require.Contains(t, old.Outcome.Error.Message, "replaced by run")

	b.hookToken(t, "order-5=_1")
	to, err := b.client.Signal(ctx, "order-5", "go", "to the latest run", nil)
	require.NoError(t, err)
	require.Equal(t, "order-5=_1", to)
	var out string
	require.NoError(t, b.client.Result(ctx, "order-5", &out), "Result of the caller's ID follows to the latest run")
	require.Equal(t, "to the latest run", out)
	latest, err := b.client.LatestRun(ctx, "order-5")
	require.NoError(t, err)
	require.Equal(t, "order-5=_1", latest)

	// The run ended: reuse is refused by default and allowed on request.
	_, code = send("ev-5", map[string]string{api.ExtRunID: "order-5"})
	require.Equal(t, string(api.CodeRunExists), code)
	r, code = send("ev-6", map[string]string{api.ExtRunID: "order-5", api.ExtReuse: "allow_failed_only"})
	require.Equal(t, string(api.CodeRunExists), code, "the latest run completed")
	r, code = send("ev-7", map[string]string{api.ExtRunID: "order-5", api.ExtReuse: "allow"})
	require.Empty(t, code)
	require.Equal(t, "order-5=_2", r.RunID)
	_, code = send("ev-8", map[string]string{api.ExtRunID: "order-5", api.ExtDelay: "later"})
	require.Equal(t, string(api.CodeInvalidRequest), code)
}
