package history_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/timerindex"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/worker"
)

var quiet = historytest.Quiet

// testBundle is what setup started (historytest.Setup), with the package's helpers.
type testBundle struct{ *historytest.Bundle }

// setup starts a server, a history service (HTTP on a free port), a scheduler and a worker of
// the test workflows, and returns a client (historytest.Setup).
func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{historytest.Setup(t)}
}

func startHistory(t *testing.T, srv *natsserver.Server) *history.Service {
	t.Helper()
	return historytest.StartHistory(t, srv)
}

// startHistoryWith starts a history service configured by hcfg and an ingress configured by
// icfg (historytest.StartHistoryWith).
func startHistoryWith(t *testing.T, srv *natsserver.Server, hcfg history.Config, icfg ingress.Config) *history.Service {
	t.Helper()
	return historytest.StartHistoryWith(t, srv, hcfg, icfg)
}

func startWorker(t *testing.T, srv *natsserver.Server, reg *flow.Registry) *worker.Worker {
	t.Helper()
	return historytest.StartWorker(t, srv, reg)
}

// startService starts a history service configured by cfg on srv, with the tests' logger and
// no HTTP listener unless cfg.HTTPAddr names one. It must stop cleanly when the test ends.
func startService(t *testing.T, srv *natsserver.Server, cfg history.Config) *history.Service {
	t.Helper()
	cfg.Conn, cfg.Logger = natstest.Connect(t, srv), quiet
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "off"
	}
	h, err := history.New(cfg)
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	return h
}

// startEnv starts on srv a history service configured by cfg (startService), an ingress
// without HTTP and a worker of reg, and returns the service and a client.
func startEnv(t *testing.T, srv *natsserver.Server, cfg history.Config, reg *flow.Registry) (*history.Service, *flow.Client) {
	t.Helper()
	h := startService(t, srv, cfg)
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), Logger: quiet})
	startWorker(t, srv, reg)
	return h, newClient(t, srv)
}

// newClient returns a client connected to srv.
func newClient(t *testing.T, srv *natsserver.Server) *flow.Client {
	t.Helper()
	c, err := flow.NewClient(t.Context(), natstest.Connect(t, srv), nil)
	require.NoError(t, err)
	return c
}

// registry returns the test workflows of build buildID (historytest.Registry).
func registry(buildID string) *flow.Registry { return historytest.Registry(buildID) }

func (b *testBundle) entry(t *testing.T, runID string) (core.Summary, bool) {
	t.Helper()
	kv, err := b.JS.KeyValue(b.Ctx, streams.RunsBucket)
	require.NoError(t, err)
	e, err := kv.Get(b.Ctx, runID)
	if err != nil {
		return core.Summary{}, false
	}
	var sum core.Summary
	require.NoError(t, json.Unmarshal(e.Value(), &sum))
	return sum, true
}

// projected returns the index entry a fresh projection of run runID's history gives.
func (b *testBundle) projected(t *testing.T, runID string) core.Summary {
	t.Helper()
	hist, err := b.Client.History(b.Ctx, runID, 0)
	require.NoError(t, err)
	require.Empty(t, core.Check(runID, hist))
	s, err := core.Project(runID, hist)
	require.NoError(t, err)
	return s.Summary()
}

func TestHistoryService(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("IndexFollowsStatusChangesOnly", func(t *testing.T) {
		index, err := b.JS.Stream(b.Ctx, "KV_"+streams.RunsBucket)
		require.NoError(t, err)
		written := func() uint64 {
			info, err := index.Info(b.Ctx)
			require.NoError(t, err)
			return info.State.LastSeq
		}
		before := written()
		runID, err := b.Client.Start(b.Ctx, "steps", 10, &flow.StartOptions{RunID: "ten"})
		require.NoError(t, err)
		var out int
		require.NoError(t, b.Client.Result(b.Ctx, runID, &out))
		require.Equal(t, 10, out)
		require.Eventually(t, func() bool { sum, ok := b.entry(t, runID); return ok && sum.Status == core.StatusCompleted },
			10*time.Second, 5*time.Millisecond)
		// Three status changes (pending, running, completed); commits applied together write
		// once for all of them.
		require.LessOrEqual(t, written()-before, uint64(3), "22 events, at most 3 index writes")
		sum, _ := b.entry(t, runID)
		require.Equal(t, b.projected(t, runID), sum)
	})

	t.Run("TimersFollowHistory", func(t *testing.T) {
		timers, err := b.JS.KeyValue(b.Ctx, streams.TimersBucket)
		require.NoError(t, err)
		runID, err := b.Client.Start(b.Ctx, "nap", time.Hour, &flow.StartOptions{RunID: "long-nap"})
		require.NoError(t, err)
		key := timerindex.Key(core.Timer{RunID: runID, Kind: core.TimerWait, ID: "nap"})
		require.Eventually(t, func() bool { _, err := timers.Get(b.Ctx, key); return err == nil }, 10*time.Second, 5*time.Millisecond,
			"the history service registers the timer of wait.scheduled")
		_, err = b.Client.Cancel(b.Ctx, runID, "no more napping")
		require.NoError(t, err)
		var runErr *flow.RunError
		require.ErrorAs(t, b.Client.Result(b.Ctx, runID, nil), &runErr)
		require.Equal(t, flow.StatusCancelled, runErr.Status)
		require.Eventually(t, func() bool { _, err := timers.Get(b.Ctx, key); return err != nil }, 10*time.Second, 5*time.Millisecond,
			"the end of the run makes its timer moot")
	})

	t.Run("ExplicitHookTokensAreReleased", func(t *testing.T) {
		for i := range 2 {
			runID, err := b.Client.Start(b.Ctx, "hook", "order-42-paid", &flow.StartOptions{RunID: fmt.Sprintf("hook-%d", i)})
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				s, err := b.Client.Snapshot(b.Ctx, runID)
				return err == nil && s.Hooks["cb"] != nil
			}, 10*time.Second, 5*time.Millisecond, "run %s created its hook", runID)
			s, err := b.Client.Snapshot(b.Ctx, runID)
			require.NoError(t, err)
			require.Equal(t, flow.StatusSuspended, s.Status, "run %s is not blocked by a token taken earlier: %+v", runID, s.Blocked)
			require.NoError(t, deliverHook(b, "order-42-paid", fmt.Sprintf("paid-%d", i)))
			var out string
			require.NoError(t, b.Client.Result(b.Ctx, runID, &out))
			require.Equal(t, fmt.Sprintf("paid-%d", i), out)
		}
	})

	t.Run("Queries", func(t *testing.T) {
		runID, err := b.Client.Start(b.Ctx, "steps", 2, &flow.StartOptions{RunID: "two"})
		require.NoError(t, err)
		require.NoError(t, b.Client.Result(b.Ctx, runID, nil))
		s, err := b.Client.SnapshotAt(b.Ctx, runID, 3)
		require.NoError(t, err)
		require.Equal(t, uint64(3), s.Seq)
		require.Equal(t, core.StepCompleted, s.Steps["s0"].Status)
		require.NotContains(t, s.Steps, "s1", "as of seq 3 the second step was not scheduled")
		_, err = b.Client.SnapshotAt(b.Ctx, runID, 99)
		require.ErrorIs(t, err, flow.ErrInvalidInput)
		_, err = b.Client.Snapshot(b.Ctx, "no-such-run")
		require.ErrorIs(t, err, flow.ErrNotFound)

		page, more, err := b.Client.HistoryPage(b.Ctx, runID, 1, 2)
		require.NoError(t, err)
		require.True(t, more)
		require.Equal(t, []uint64{2, 3}, []uint64{page[0].Seq, page[1].Seq})

		require.Eventually(t, func() bool {
			p, err := b.Client.Runs(b.Ctx, &flow.RunsFilter{Definition: "steps", Status: []string{"completed"}})
			return err == nil && p.Total >= 2
		}, 10*time.Second, 5*time.Millisecond)
		first, err := b.Client.Runs(b.Ctx, &flow.RunsFilter{Definition: "steps", Limit: 1})
		require.NoError(t, err)
		require.Len(t, first.Runs, 1)
		require.NotEmpty(t, first.Next)
		second, err := b.Client.Runs(b.Ctx, &flow.RunsFilter{Definition: "steps", Limit: 1, Cursor: first.Next})
		require.NoError(t, err)
		require.Len(t, second.Runs, 1)
		require.NotEqual(t, first.Runs[0].RunID, second.Runs[0].RunID)
		_, err = b.Client.Runs(b.Ctx, &flow.RunsFilter{Status: []string{"sleeping"}})
		require.ErrorIs(t, err, flow.ErrInvalidInput)

		base := "http://" + b.History.HTTPAddr()
		var got struct {
			Snapshot core.Snapshot `json:"snapshot"`
		}
		getJSON(t, base+"/v1/runs/two?at=2", http.StatusOK, &got)
		require.Equal(t, uint64(2), got.Snapshot.Seq)
		var list struct {
			Runs []core.Summary `json:"runs"`
		}
		getJSON(t, base+"/v1/runs?definition=steps&status=completed&limit=10", http.StatusOK, &list)
		require.NotEmpty(t, list.Runs)
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		getJSON(t, base+"/v1/runs/no-such-run", http.StatusNotFound, &e)
		require.Contains(t, e.Error.Message, "does not exist")
		resp, err := http.Get(base + "/v1/runs/two/watch")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, 6, strings.Count(string(body), "\nevent: "), "one server-sent event per event of a finished run:\n%s", body)
		require.Contains(t, string(body), "event: run.completed")
	})

	t.Run("FeedPublishesEveryEventOnce", func(t *testing.T) {
		nc := natstest.Connect(t, b.Srv)
		events := make(chan *nats.Msg, 100)
		sub, err := nc.ChanSubscribe("flow.events.steps.feed-run.>", events)
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe() }()
		require.NoError(t, nc.Flush())
		runID, err := b.Client.Start(b.Ctx, "steps", 3, &flow.StartOptions{RunID: "feed-run"})
		require.NoError(t, err)
		require.NoError(t, b.Client.Result(b.Ctx, runID, nil))
		hist, err := b.Client.History(b.Ctx, runID, 0)
		require.NoError(t, err)
		for _, want := range hist {
			var m *nats.Msg
			select {
			case m = <-events:
			case <-b.Ctx.Done():
				t.Fatalf("no feed event for seq %d", want.Seq)
			}
			require.Equal(t, "flow.events.steps.feed-run."+string(want.Type()), m.Subject)
			e, err := binding.ToEvent(b.Ctx, cenats.NewMessage(m))
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("feed-run:%d", want.Seq), e.ID())
			require.Equal(t, "dev.flow."+string(want.Type()), e.Type())
			require.Equal(t, "feed-run", e.Subject())
			require.True(t, e.Time().Equal(want.Time))
			payload, err := json.Marshal(want.Payload)
			require.NoError(t, err)
			require.JSONEq(t, string(payload), string(e.Data()))
		}
		select {
		case m := <-events:
			t.Fatalf("an extra feed event: %s", m.Subject)
		default:
		}
	})
}

// deliverHook delivers payload to the hook token routes to, through an engine of its own.
func deliverHook(b *testBundle, token, payload string) error {
	st, err := jsstore.New(b.Ctx, b.JS, nil)
	if err != nil {
		return err
	}
	host, err := jshost.New(b.Ctx, b.JS, "test", quiet)
	if err != nil {
		return err
	}
	e, err := engine.New(engine.Config{Store: st, Host: host, Logger: quiet})
	if err != nil {
		return err
	}
	p, _ := json.Marshal(payload)
	_, err = e.DeliverHook(b.Ctx, token, p, "delivery-"+payload)
	return err
}

func getJSON(t *testing.T, url string, status int, v any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer func() { require.NoError(t, resp.Body.Close()) }()
	require.Equal(t, status, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

// Two replicas share the history consumer: both apply commits, and every run's index entry
// ends equal to a fresh projection of its history.
func TestReplicasShareTheWork(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	a, b := startHistory(t, srv), startHistory(t, srv)
	startWorker(t, srv, registry(""))
	client := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	bundle := &testBundle{&historytest.Bundle{Srv: srv, JS: natstest.JetStream(t, srv), Client: client, Ctx: ctx}}
	ids := make([]string, 100)
	each(t, len(ids), func(i int) error {
		id, err := client.Start(ctx, "steps", 3, nil)
		if err == nil {
			ids[i] = id
			err = client.Result(ctx, id, nil)
		}
		return err
	})
	require.Positive(t, a.Applied(), "replica a applied commits")
	require.Positive(t, b.Applied(), "replica b applied commits")
	for _, id := range ids {
		want := bundle.projected(t, id)
		require.Eventually(t, func() bool { got, ok := bundle.entry(t, id); return ok && got.Equal(want) }, 10*time.Second, 5*time.Millisecond,
			"run %s is indexed as it ended", id)
	}
}
