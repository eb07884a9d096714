package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/worker"
)

type orderState struct {
	Stage  string `json:"stage"`
	Charge string `json:"charge,omitempty"`
}

// registerQueried registers workflow "queried": it charges (a step that blocks until release
// is closed), then completes. It handles "state" from inside its code, and "status" and "fail"
// through RegisterQuery.
func registerQueried(release <-chan struct{}, charging chan<- struct{}) func(*flow.Registry) {
	return func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "queried", func(ctx *flow.Context, in string) (flow.Decision, error) {
			st := orderState{Stage: "charging"}
			out, ok, err := flow.Output[string](ctx, "charge")
			if ok {
				st = orderState{Stage: "charged", Charge: out}
			}
			flow.HandleQuery(ctx, "state", func(prefix string) (orderState, error) {
				st.Stage = prefix + st.Stage
				return st, nil
			})
			if err != nil || !ok {
				return ctx.ScheduleStep("charge", "charge", in), err
			}
			return ctx.Complete(st), nil
		})
		flow.RegisterStep(reg, "charge", func(ctx context.Context, in string) (string, error) {
			select {
			case charging <- struct{}{}:
			default:
			}
			select {
			case <-release:
				return "charged " + in, nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		})
		flow.RegisterQuery(reg, "queried", "status", func(ctx *flow.Context, _ struct{}) (flow.Status, error) {
			return ctx.Snapshot().Status, nil
		})
		flow.RegisterQuery(reg, "queried", "fail", func(ctx *flow.Context, _ struct{}) (int, error) {
			return 0, &flow.Error{Kind: "not_ready", Message: "ask later"}
		})
	}
}

type queryBundle struct {
	client *flow.Client
	worker *worker.Worker
}

// setupOn starts the services on srv with a worker of cfg (Conn and Logger set here).
func setupOn(t *testing.T, srv *natsserver.Server, register func(*flow.Registry), cfg worker.Config) *queryBundle {
	t.Helper()
	startHistoryAndIngress(t, srv)
	reg := flow.NewRegistry(nil)
	register(reg)
	cfg.Conn, cfg.Logger = natstest.Connect(t, srv), quiet
	w, err := worker.New(cfg, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	c, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	return &queryBundle{client: c, worker: w}
}

func TestQueries(t *testing.T) {
	t.Parallel()
	release, charging := make(chan struct{}), make(chan struct{}, 1)
	b := setup(t, registerQueried(release, charging))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	runID, err := b.client.Start(ctx, "queried", "42.00", &flow.StartOptions{RunID: "queried-1"})
	require.NoError(t, err)
	<-charging // the step runs, and blocks until release is closed

	t.Run("DuringAStep", func(t *testing.T) {
		var st orderState
		require.NoError(t, b.client.Query(ctx, runID, "state", "now ", &st))
		require.Equal(t, orderState{Stage: "now charging"}, st)
		var status flow.Status
		require.NoError(t, b.client.Query(ctx, runID, "status", nil, &status))
		require.Equal(t, flow.StatusRunning, status)
		ans, err := b.client.QueryRaw(ctx, runID, "status", nil)
		require.NoError(t, err)
		require.Equal(t, uint64(2), ans.Seq, "answered from the snapshot after step.scheduled")
	})

	t.Run("UnknownQuery", func(t *testing.T) {
		err := b.client.Query(ctx, runID, "eta", nil, nil)
		require.ErrorIs(t, err, flow.ErrUnknownQuery)
		var u *flow.QueryError
		require.True(t, errors.As(err, &u))
		require.Equal(t, []string{"fail", "state", "status"}, u.Registered)
		require.ErrorContains(t, err, `workflow "queried" (run "queried-1") has no query "eta"; it handles fail, state, status`)
	})

	t.Run("BadArgs", func(t *testing.T) {
		err := b.client.Query(ctx, runID, "state", map[string]int{"prefix": 1}, nil)
		require.ErrorIs(t, err, flow.ErrInvalidInput)
		require.ErrorContains(t, err, `the arguments of query "state" (run "queried-1") do not decode into string`)
		_, err = b.client.QueryRaw(ctx, runID, "state", []byte(`{not json`))
		require.ErrorIs(t, err, flow.ErrInvalidInput)
		require.ErrorIs(t, b.client.Query(ctx, runID, "bad.name", nil, nil), flow.ErrInvalidID)
	})

	t.Run("HandlerError", func(t *testing.T) {
		err := b.client.Query(ctx, runID, "fail", nil, nil)
		var f *flow.QueryError
		require.True(t, errors.As(err, &f), "got %v", err)
		require.ErrorIs(t, err, flow.ErrQueryFailed)
		require.Equal(t, "not_ready", f.Kind)
		require.Equal(t, "ask later", f.Message)
	})

	t.Run("UnknownRun", func(t *testing.T) {
		require.ErrorIs(t, b.client.Query(ctx, "no-such-run", "state", nil, nil), flow.ErrNotFound)
	})

	t.Run("EndedRun", func(t *testing.T) {
		close(release)
		var out orderState
		require.NoError(t, b.client.Result(ctx, runID, &out))
		hist, err := b.client.History(ctx, runID, 0)
		require.NoError(t, err)
		var st orderState
		require.NoError(t, b.client.Query(ctx, runID, "state", "", &st))
		require.Equal(t, orderState{Stage: "charged", Charge: "charged 42.00"}, st)
		var status flow.Status
		require.NoError(t, b.client.Query(ctx, runID, "status", nil, &status))
		require.Equal(t, flow.StatusCompleted, status)
		again, err := b.client.History(ctx, runID, 0)
		require.NoError(t, err)
		require.Equal(t, hist, again, "queries append nothing")
	})
}

func TestQueryColdWorker(t *testing.T) {
	t.Parallel()
	release, charging := make(chan struct{}), make(chan struct{}, 1)
	defer close(release)
	srv := natstest.RunJetStream(t)
	b := setupOn(t, srv, registerQueried(release, charging), worker.Config{CacheSize: -1})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	runID, err := b.client.Start(ctx, "queried", "1.00", nil)
	require.NoError(t, err)
	<-charging
	var st orderState
	require.NoError(t, b.client.Query(ctx, runID, "state", "", &st), "a worker without the run cached reads its history")
	require.Equal(t, orderState{Stage: "charging"}, st)
}

func TestQueryNoWorker(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	done := make(chan struct{})
	close(done)
	b := setupOn(t, srv, registerQueried(done, make(chan struct{}, 1)), worker.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	runID, err := b.client.Start(ctx, "queried", "1.00", nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Result(ctx, runID, nil))
	require.NoError(t, b.worker.Stop(ctx))
	err = b.client.Query(ctx, runID, "state", "", nil)
	require.ErrorIs(t, err, flow.ErrNoWorker)
	require.ErrorContains(t, err, `no live worker runs workflow "queried" on queue "default" to answer query "state"`)
}
