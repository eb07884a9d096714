package ingress_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/ingress"
)

// The ingress never writes FLOW_SCHEDULES nor FLOW_BATCHES: with no scheduler running, a
// schedule's create and trigger and a batch job's create, over NATS and HTTP, are refused with
// the retryable unavailable error (503) saying the scheduler is not running, and both buckets
// stay empty. A request the ingress refuses itself (an unknown definition) is answered as before.
func TestScheduleAndBatchChangesNeedTheScheduler(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b, _ := setupParts(t, ingress.Config{}, parts{noScheduler: true})
	srv, in, client := b.srv, b.in, b.client
	var err error

	notRunning := func(err error) {
		t.Helper()
		var e *api.IngressError
		require.ErrorAs(t, err, &e)
		require.Equal(t, api.CodeIngressBusy, e.Code, e.Message)
		require.Contains(t, e.Message, "the scheduler is not running")
	}
	_, err = client.Schedules().Create(ctx, "nightly", flow.ScheduleConfig{Every: time.Minute, Definition: "gaet"})
	require.ErrorIs(t, err, flow.ErrNoWorker, "the ingress checks a definition itself")
	// The worker registers "gate" a moment after it started.
	require.Eventually(t, func() bool {
		_, err = client.Schedules().Create(ctx, "nightly", flow.ScheduleConfig{Every: time.Minute, Definition: "gate"})
		return !errors.Is(err, flow.ErrNoWorker)
	}, 20*time.Second, 20*time.Millisecond)
	notRunning(err)
	_, err = client.Schedules().Trigger(ctx, "nightly", &flow.TriggerOptions{RequestID: "t-1"})
	notRunning(err)
	_, err = client.Batches().Start(ctx, flow.BatchSpec{Op: flow.BatchCancel, Where: `definition = "gate"`}, &flow.BatchOptions{ID: "b1"})
	notRunning(err)

	post := func(path, body string) (int, api.IngressError) {
		return sendJSON[api.IngressError](ctx, t, http.MethodPost, "http://"+in.HTTPAddr()+path, body)
	}
	for path, body := range map[string]string{
		"/v1/schedules":                 `{"name":"hourly","spec":{"every":"1h"},"definition":"gate"}`,
		"/v1/schedules/nightly/pause":   `{"note":"maintenance"}`,
		"/v1/batches":                   `{"id":"b2","spec":{"op":"cancel","where":"definition = \"gate\""}}`,
		"/v1/schedules/nightly/trigger": ``,
	} {
		code, e := post(path, body)
		require.Equal(t, http.StatusServiceUnavailable, code, "%s: %+v", path, e)
		require.Equal(t, api.CodeIngressBusy, e.Code, path)
		require.Contains(t, e.Message, "the scheduler is not running", path)
	}

	js := natstest.JetStream(t, srv)
	for _, bucket := range []string{streams.SchedulesBucket, streams.BatchesBucket} {
		st, err := js.Stream(ctx, "KV_"+bucket)
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		require.Zero(t, info.State.Msgs, "the ingress wrote to %s", bucket)
	}
}
