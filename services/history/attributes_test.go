package history_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
)

// attributesRegistry registers "order": it starts with search attributes, upserts stage=paid at
// once, waits for signal "ship", upserts stage=shipped and completes.
func attributesRegistry() *flow.Registry {
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "order", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		switch {
		case !ctx.Upserted("paid"):
			return ctx.UpsertAttributes("paid", flow.Attrs{"stage": "paid", "paid_at": ctx.Now()}), nil
		case ctx.Signal("ship") == nil:
			return ctx.AwaitSignal("ship", "ship"), nil
		case !ctx.Upserted("shipped"):
			return ctx.UpsertAttributes("shipped", flow.Attrs{"stage": "shipped"}), nil
		}
		var customer string
		_, err := ctx.Attribute("customer", &customer)
		return ctx.Complete(customer), err
	}, flow.WithSearchAttributes(flow.Keyword("customer"), flow.Int("amount"), flow.Keyword("stage"), flow.Time("paid_at"),
		flow.KeywordList("tags"), flow.Bool("vip")))
	return reg
}

// Search attributes end to end on a real server: set at start through the ingress, changed by
// upserts, indexed by the history service and filtered by the list API (NATS and HTTP), with
// clear refusals of undeclared attributes, mistyped values and invalid filters.
func TestSearchAttributesEndToEnd(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h := startHistory(t, srv)
	startWorker(t, srv, attributesRegistry())
	client := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	a, err := client.Start(ctx, "order", nil, &flow.StartOptions{RunID: "order-a",
		Attributes: flow.Attrs{"customer": "c-42", "amount": 120, "tags": []string{"eu", "priority"}, "vip": true}})
	require.NoError(t, err)
	b, err := client.Start(ctx, "order", nil, &flow.StartOptions{RunID: "order-b",
		Attributes: flow.Attrs{"customer": "c-7", "amount": "15"}}) // a string that reads as the declared int
	require.NoError(t, err)

	list := func(where string) ([]string, error) {
		page, err := client.Runs(ctx, &flow.RunsFilter{Where: where})
		if err != nil {
			return nil, err
		}
		var ids []string
		for _, r := range page.Runs {
			ids = append(ids, r.RunID)
		}
		slices.Sort(ids)
		return ids, nil
	}
	eventually := func(where string, want ...string) {
		t.Helper()
		require.Eventually(t, func() bool {
			ids, err := list(where)
			return err == nil && slices.Equal(ids, want)
		}, 20*time.Second, 10*time.Millisecond, "where %s lists %v", where, want)
	}
	eventually(`stage = "paid"`, a, b)
	eventually(`customer = "c-42" and stage = "paid" and started > "2026-01-01"`, a)
	eventually(`amount < 100 or tags contains "nope"`, b)
	eventually(`tags contains "priority" and vip = true and paid_at <= "2999-01-01"`, a)
	eventually(`not (customer in ("c-42", "c-7"))`)

	// The upsert is in the history, typed, and the run's summary carries the merged values.
	hist, err := client.History(ctx, a, 0)
	require.NoError(t, err)
	var upserts int
	for _, e := range hist {
		if u, ok := e.Payload.(*event.AttributesUpserted); ok {
			upserts++
			require.Equal(t, "paid", u.UpsertID)
			require.Equal(t, event.AttrTime, u.Attributes["paid_at"].Type)
		}
	}
	require.Equal(t, 1, upserts)
	d, err := client.Describe(ctx, a, 0)
	require.NoError(t, err)
	require.NotNil(t, d.Entry)
	require.True(t, d.Entry.Attributes.Equal(d.Snapshot.Attributes), "the index entry holds the run's attributes")
	amount, _ := d.Entry.Attributes["amount"].Int()
	require.Equal(t, int64(120), amount)

	// Later upserts move the index.
	_, err = client.Signal(ctx, a, "ship", nil, nil)
	require.NoError(t, err)
	var out string
	require.NoError(t, client.Result(ctx, a, &out))
	require.Equal(t, "c-42", out)
	eventually(`stage = "shipped" and status = "completed"`, a)
	eventually(`stage = "paid"`, b)

	// Refusals, each saying what to do.
	_, err = client.Start(ctx, "order", nil, &flow.StartOptions{Attributes: flow.Attrs{"region": "eu"}})
	require.ErrorContains(t, err, `search attribute "region" is not declared by the workflow (declared: amount (int), customer (keyword)`)
	_, err = client.Start(ctx, "order", nil, &flow.StartOptions{Attributes: flow.Attrs{"amount": "lots"}})
	require.ErrorContains(t, err, `search attribute "amount"`)
	require.ErrorContains(t, err, "an int attribute takes an integer")

	_, err = list(`custmer = "c-42"`)
	require.ErrorContains(t, err, `unknown attribute "custmer"; known: run_id (keyword)`)
	require.ErrorContains(t, err, "customer (keyword)")
	_, err = list(`amount = "120"`)
	require.ErrorContains(t, err, "amount is an int")
	require.ErrorContains(t, err, "use an integer literal")

	base := "http://" + h.HTTPAddr()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := get("/v1/runs?where=" + url.QueryEscape(`customer = "c-7"`))
	require.Equal(t, http.StatusOK, code, body)
	var page struct {
		Runs []struct {
			RunID      string           `json:"run_id"`
			Attributes event.Attributes `json:"attributes"`
		} `json:"runs"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &page))
	require.Len(t, page.Runs, 1)
	require.Equal(t, b, page.Runs[0].RunID)
	code, body = get("/v1/runs?where=" + url.QueryEscape(`tags = "eu"`))
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "tags is a keyword_list; compare it with contains")

	// The UI's filter box: matching rows, or the error next to the box with a 400.
	code, body = get("/ui/?where=" + url.QueryEscape(`customer = "c-7"`))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `data-run="order-b"`)
	require.NotContains(t, body, `data-run="order-a"`)
	require.Contains(t, body, "customer=&#34;c-7&#34;")
	code, body = get("/ui/?where=" + url.QueryEscape(`customer ==`))
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, `class="where-error"`)
	require.Contains(t, body, "is not an operator")
}

// The runs index's attributes are derived from history: with the index entry gone, a history
// service that rebuilds restores them, and filters find the run again.
func TestSearchAttributesRebuiltFromHistory(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h1, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h1.Start(t.Context()))
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet})
	startWorker(t, srv, attributesRegistry())
	client := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	id, err := client.Start(ctx, "order", nil, &flow.StartOptions{Attributes: flow.Attrs{"customer": "c-9"}})
	require.NoError(t, err)
	where := &flow.RunsFilter{Where: `customer = "c-9" and stage = "paid"`}
	listed := func() bool {
		page, err := client.Runs(ctx, where)
		return err == nil && len(page.Runs) == 1 && page.Runs[0].RunID == id
	}
	require.Eventually(t, listed, 20*time.Second, 10*time.Millisecond, "the run is indexed with its attributes")
	require.NoError(t, h1.Stop())

	runs, err := natstest.JetStream(t, srv).KeyValue(ctx, streams.RunsBucket)
	require.NoError(t, err)
	require.NoError(t, runs.Delete(ctx, id))
	startService(t, srv, history.Config{Rebuild: true})
	require.Eventually(t, listed, 20*time.Second, 10*time.Millisecond, "the rebuilt entry holds the run's attributes")
}
