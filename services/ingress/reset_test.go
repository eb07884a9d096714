package ingress_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/ingress"
)

// The reset doors: Client.Reset over NATS, POST /v1/runs/{run}/reset over HTTP, both
// idempotent; a point that is not a reset point is a 400 naming the nearest ones, and nothing is
// appended.
func TestResetDoors(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{})
	ctx := t.Context()
	_, err := b.client.Start(ctx, "gate", nil, &flow.StartOptions{RunID: "g1"})
	require.NoError(t, err)
	b.hookToken(t, "g1")
	_, err = b.client.Signal(ctx, "g1", "go", "went", nil)
	require.NoError(t, err)
	var out string
	require.NoError(t, b.client.Result(ctx, "g1", &out))
	// 1 run.started 2 hook.created 3 signal.awaited 4 signal.received 5 run.completed

	r, err := b.client.Reset(ctx, "g1", &flow.ResetOptions{LastDecision: true, Reason: "again"})
	require.NoError(t, err)
	require.Equal(t, uint64(4), r.Point)
	require.Equal(t, event.ResetToLastDecision, r.Mode)
	var again string
	require.NoError(t, b.client.Result(ctx, r.NewRunID, &again))
	require.Equal(t, "went", again)
	r2, err := b.client.Reset(ctx, "g1", &flow.ResetOptions{LastDecision: true, Reason: "again"})
	require.NoError(t, err)
	require.Equal(t, r.NewRunID, r2.NewRunID, "a repeat returns the same run")
	_, err = b.client.Reset(ctx, "g1", &flow.ResetOptions{Seq: 2})
	require.ErrorIs(t, err, flow.ErrInvalidInput)
	require.ErrorContains(t, err, "nearest reset points: 1 (before), 4 (after)")
	_, err = b.client.Reset(ctx, "g1", &flow.ResetOptions{Seq: 2, LastDecision: true})
	require.ErrorIs(t, err, flow.ErrInvalidInput)
	_, err = b.client.Reset(ctx, "nope", &flow.ResetOptions{Seq: 1})
	require.ErrorIs(t, err, flow.ErrNotFound)

	last, before := b.historyState(t, "g1")
	status, e := b.do(t, httpReq{path: "/v1/runs/g1/reset", contentType: "application/json", body: `{"mode":"seq","seq":3}`})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, e.Message, "seq 3 is not a reset point")
	status, _ = b.do(t, httpReq{path: "/v1/runs/g1/reset", contentType: "application/json", body: `{"mode":"sideways"}`})
	require.Equal(t, http.StatusBadRequest, status)
	last2, after := b.historyState(t, "g1")
	require.Equal(t, last, last2, "nothing appended")
	require.Equal(t, before, after)

	post := func() api.ResetResponse {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+"/v1/runs/g1/reset", bytes.NewReader([]byte(`{"mode":"seq","seq":1,"drop_inputs":true}`)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(api.HeaderIdempotencyKey, "http-1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var rr api.ResetResponse
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&rr))
		return rr
	}
	rr := post()
	require.Equal(t, uint64(1), rr.Point)
	require.Equal(t, rr, post(), "the same Idempotency-Key, the same run")
	_, err = b.client.Signal(ctx, rr.NewRunID, "go", "http", nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Result(ctx, rr.NewRunID, &out))
	require.Equal(t, "http", out)

	old, err := b.client.History(ctx, "g1", 0)
	require.NoError(t, err)
	for _, id := range []string{r.NewRunID, rr.NewRunID} {
		nw, err := b.client.History(ctx, id, 0)
		require.NoError(t, err)
		require.Empty(t, core.Check(id, nw))
		require.Empty(t, core.CheckReset("g1", old, id, nw))
	}
	require.Empty(t, core.Check("g1", old))
}
