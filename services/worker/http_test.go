package worker_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/worker"
)

// probe GETs url and returns the status and body ("" and 0 when nothing answers).
func probe(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// The worker's readiness: 503 until Start has finished, 200 while it takes tasks, 503 from the
// moment Stop begins (while it still finishes a step), and the listener closed once stopped.
func TestProbesFollowStartAndStop(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	startHistoryAndIngress(t, srv)

	entered, release := make(chan struct{}), make(chan struct{})
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "hold", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if ctx.StepOutput("hold") == nil {
			return ctx.ScheduleStep("hold", "hold", nil), nil
		}
		return ctx.Complete(nil), nil
	})
	flow.RegisterStep(reg, "hold", func(ctx context.Context, _ any) (bool, error) {
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return true, nil
	})
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "127.0.0.1:0", Logger: quiet}, reg)
	require.NoError(t, err)
	require.ErrorContains(t, w.Ready(t.Context()), "starting")
	require.Empty(t, w.HTTPAddr(), "nothing listens before Start")
	require.NoError(t, w.Start(t.Context()))
	base := "http://" + w.HTTPAddr()

	code, body := probe(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"ready":true}`, body)
	code, _ = probe(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	require.Contains(t, string(metrics), "# TYPE go_goroutines gauge")

	client, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = client.Start(ctx, "hold", nil, nil)
	require.NoError(t, err)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the step never started")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(ctx) }()
	// Stop waits for the step: meanwhile the listener is up and says the worker is not ready.
	require.Eventually(t, func() bool {
		code, body := probe(t, base+"/readyz")
		return code == http.StatusServiceUnavailable && body == "{\"ready\":false,\"reason\":\"stopping\"}\n"
	}, 10*time.Second, 10*time.Millisecond)
	close(release)
	require.NoError(t, <-stopped)
	code, _ = probe(t, base+"/readyz")
	require.Zero(t, code, "the listener is closed once the worker stopped")
}

// A worker whose task consumer is gone is not ready, and says why.
func TestReadyNeedsTheConsumer(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "127.0.0.1:0", Logger: quiet}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	require.NoError(t, w.Ready(t.Context()))
	js := natstest.JetStream(t, srv)
	require.NoError(t, js.DeleteConsumer(t.Context(), streams.Tasks, "worker-"+streams.DefaultQueue))
	code, body := probe(t, "http://"+w.HTTPAddr()+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	var r struct {
		Ready  bool   `json:"ready"`
		Reason string `json:"reason"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	require.Contains(t, r.Reason, "task consumer worker-default")
}

// The zero value serves no HTTP, so that many workers share a process; a bad address is
// refused by New.
func TestHTTPAddrZeroValueAndErrors(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	require.Empty(t, w.HTTPAddr())
	require.NoError(t, w.Ready(t.Context()))

	_, err = worker.New(worker.Config{HTTPAddr: "8423"}, reg)
	require.ErrorContains(t, err, "FLOW_WORKER_HTTP_ADDR")
}
