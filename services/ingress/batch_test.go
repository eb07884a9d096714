package ingress_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
)

// TestBatchDoors: batch jobs through the Go client (the NATS door) and over HTTP: a dry run
// counts the runs, a job cancels them, a retried create returns the same job, another spec
// under its ID is refused, and an unknown job and a bad filter are clear errors.
func TestBatchDoors(t *testing.T) {
	srv := natstest.RunJetStream(t)
	ctx := t.Context()
	quiet := natstest.Logger()
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { _ = h.Stop() })
	in := ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "127.0.0.1:0", Logger: quiet})
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: quiet, NoAdmission: true})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop() })
	require.Eventually(t, s.AnswersBatches, 20*time.Second, 5*time.Millisecond, "the scheduler leads the batch executor")
	client, err := flow.NewClient(ctx, natstest.Connect(t, srv), nil)
	require.NoError(t, err)

	nc := natstest.Connect(t, srv)
	for i := range 6 {
		ingresstest.Accepted(t, nc, map[bool]string{true: "invoice", false: "refund"}[i < 4], fmt.Sprintf("run-%d", i), i, "")
	}
	require.Eventually(t, func() bool {
		p, err := client.Runs(ctx, &flow.RunsFilter{Limit: 10})
		return err == nil && p.Total == 6
	}, 10*time.Second, 10*time.Millisecond)

	spec := flow.BatchSpec{Op: flow.BatchCancel, Where: `definition = "invoice"`, Reason: "duplicate invoices"}
	dr, err := client.Batches().DryRun(ctx, spec, 2)
	require.NoError(t, err)
	require.Equal(t, 4, dr.Matches)
	require.Len(t, dr.Sample, 2)

	j, err := client.Batches().Start(ctx, spec, &flow.BatchOptions{ID: "dedupe"})
	require.NoError(t, err)
	require.Equal(t, flow.BatchPending, j.State)
	again, err := client.Batches().Start(ctx, spec, &flow.BatchOptions{ID: "dedupe"})
	require.NoError(t, err, "a retried create returns the job")
	require.Equal(t, j.CreatedAt, again.CreatedAt)
	_, err = client.Batches().Start(ctx, flow.BatchSpec{Op: flow.BatchTerminate, Where: `definition = "invoice"`}, &flow.BatchOptions{ID: "dedupe"})
	require.ErrorIs(t, err, flow.ErrBatchExists)

	j, err = client.Batches().Await(ctx, "dedupe")
	require.NoError(t, err)
	require.Equal(t, flow.BatchCompleted, j.State)
	require.Equal(t, 4, j.Applied)
	for i := range 4 {
		snap, err := client.Snapshot(ctx, fmt.Sprintf("run-%d", i))
		require.NoError(t, err)
		require.True(t, snap.CancelRequested)
	}
	jobs, err := client.Batches().List(ctx, nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	stopped, err := client.Batches().Stop(ctx, "dedupe", "")
	require.NoError(t, err)
	require.Equal(t, flow.BatchCompleted, stopped.State, "stopping an ended job changes nothing")

	_, err = client.Batches().Get(ctx, "nope")
	require.ErrorIs(t, err, flow.ErrBatchNotFound)
	_, err = client.Batches().Start(ctx, flow.BatchSpec{Op: flow.BatchCancel, Where: `defintion = "invoice"`}, nil)
	require.ErrorIs(t, err, flow.ErrInvalidInput)
	require.ErrorContains(t, err, `unknown attribute "defintion"`)
	_, err = client.Batches().Start(ctx, flow.BatchSpec{Op: flow.BatchCancel}, nil)
	require.ErrorContains(t, err, "no filter")

	// HTTP.
	base := "http://" + in.HTTPAddr()
	call := func(method, path, body string) (int, map[string]any) {
		return sendJSON[map[string]any](ctx, t, method, base+path, body)
	}
	code, out := call(http.MethodPost, "/v1/batches", `{"id":"end-refunds","spec":{"op":"terminate","where":"definition = \"refund\"","rate":100}}`)
	require.Equal(t, http.StatusCreated, code, out)
	code, out = call(http.MethodPost, "/v1/batches", `{"id":"end-refunds","spec":{"op":"terminate","where":"definition = \"refund\"","rate":100}}`)
	require.Equal(t, http.StatusOK, code, out)
	require.Eventually(t, func() bool {
		_, out := call(http.MethodGet, "/v1/batches/end-refunds", "")
		return out["job"].(map[string]any)["state"] == "completed"
	}, 10*time.Second, 20*time.Millisecond)
	_, out = call(http.MethodGet, "/v1/batches/end-refunds", "")
	require.EqualValues(t, 2, out["job"].(map[string]any)["applied"])
	code, out = call(http.MethodGet, "/v1/batches?state=completed&limit=1", "")
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 2, out["total"])
	require.Len(t, out["jobs"], 1)
	code, _ = call(http.MethodPost, "/v1/batches/end-refunds/stop", `{"reason":"late"}`)
	require.Equal(t, http.StatusOK, code)
	code, out = call(http.MethodGet, "/v1/batches/missing", "")
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, string(api.CodeBatchNotFound), out["code"])
	code, out = call(http.MethodPost, "/v1/batches", `{"spec":{"op":"cancel","where":"status = \"runing\""}}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, out["message"], `unknown status "runing"`)
	code, out = call(http.MethodPost, "/v1/batches", `{"dry_run":true,"spec":{"op":"signal","signal":"poke","where":"definition = \"refund\""}}`)
	require.Equal(t, http.StatusOK, code, out)
	require.EqualValues(t, 2, out["matches"])
}
