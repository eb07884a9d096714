package history_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
)

// The update endpoint answers where an update stands, waits for it to settle, and answers an
// update whose run ended first as aborted; the run page lists the run's updates.
func TestUpdateEndpointAndPage(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h := startHistory(t, srv)
	reg := registry("")
	flow.RegisterUpdate(reg, "await", "echo", flow.UpdateHandler[string]{
		Complete: func(_ *flow.Context, _ *flow.Update, s string) (any, error) { return s + "!", nil },
	})
	flow.RegisterUpdate(reg, "await", "hold", flow.UpdateHandler[any]{}) // accepted, never completed
	flow.RegisterUpdate(reg, "await", "boom", flow.UpdateHandler[any]{
		Validate: func(*flow.Context, *flow.Update, any) error { panic("handler bug") },
	})
	startWorker(t, srv, reg)
	c := newClient(t, srv)
	ctx := t.Context()
	runID, err := c.Start(ctx, "await", nil, &flow.StartOptions{RunID: "upd-page"})
	require.NoError(t, err)

	out, err := c.Update(ctx, runID, "echo", "hi", &flow.UpdateOptions{UpdateID: "e1", Wait: true})
	require.NoError(t, err)
	require.JSONEq(t, `"hi!"`, string(out.Result))

	// An open update: a bounded wait answers with where it stands.
	_, err = c.Update(ctx, runID, "hold", nil, &flow.UpdateOptions{UpdateID: "h1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := c.UpdateResult(ctx, runID, "h1")
		return err == nil && st.Status == flow.UpdateAccepted
	}, 10*time.Second, 5*time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c.AwaitUpdate(short, runID, "h1")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	p := historytest.Get(t, h.HTTPAddr(), "/ui/runs/"+runID)
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `id="updates"`)
	require.Contains(t, p.Body, `<span class="badge sst-completed">completed</span> <code>&#34;hi!&#34;</code>`)
	require.Contains(t, p.Body, `<span class="badge sst-running">accepted</span>`)
	require.Contains(t, p.Body, `update e1 completed`)

	// The run ends: the open update is aborted, and a waiter learns it at once.
	done := make(chan error, 1)
	go func() {
		_, err := c.AwaitUpdate(ctx, runID, "h1")
		done <- err
	}()
	_, err = c.Terminate(ctx, runID, "enough")
	require.NoError(t, err)
	select {
	case err := <-done:
		require.ErrorIs(t, err, flow.ErrUpdateAborted)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not learn that the run ended")
	}
	_, err = c.UpdateResult(ctx, runID, "missing")
	require.ErrorIs(t, err, flow.ErrNotFound)

	// A handler that panics blocks its run; the waiter learns it once the decision failed.
	other, err := c.Start(ctx, "await", nil, &flow.StartOptions{RunID: "upd-boom"})
	require.NoError(t, err)
	began := time.Now()
	_, err = c.Update(ctx, other, "boom", nil, &flow.UpdateOptions{Wait: true})
	var runErr *flow.RunError
	require.ErrorAs(t, err, &runErr)
	require.Equal(t, flow.StatusBlocked, runErr.Status)
	require.Contains(t, runErr.Message, "handler bug")
	require.Less(t, time.Since(began), 10*time.Second)
}
