package history_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/worker"
)

func TestListDefinitions(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	h := startHistory(t, srv)
	v1 := startWorker(t, srv, registry("v1"))
	other, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Queue: "other", Logger: quiet}, registry(""))
	require.NoError(t, err)
	require.NoError(t, other.Start(t.Context()))
	idle := startWorker(t, srv, flow.NewRegistry(&flow.RegistryOptions{Logger: quiet}))
	client := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	served := func(defs []flow.DefinitionInfo, queue, name string) []string {
		for _, d := range defs {
			if d.Queue == queue && d.Definition == name {
				ids := []string{}
				for _, w := range d.Workers {
					ids = append(ids, w.ID)
				}
				return ids
			}
		}
		return nil
	}
	// The service's view follows FLOW_WORKERS and FLOW_DEFINITIONS through two watches, each of
	// which may lag the writes of a worker that just started: wait until it holds everything
	// asserted below (both workers serving "steps", v1's registration, the idle worker).
	registered := func(defs []flow.DefinitionInfo, queue, name string) bool {
		for _, d := range defs {
			if d.Queue == queue && d.Definition == name {
				return !d.UpdatedAt.IsZero()
			}
		}
		return false
	}
	idleSeen := func() bool {
		resp, err := http.Get("http://" + h.HTTPAddr() + "/v1/definitions?queue=default")
		if err != nil {
			return false
		}
		defer func() { _ = resp.Body.Close() }()
		var got api.DefinitionsResponse
		return json.NewDecoder(resp.Body).Decode(&got) == nil && len(got.Idle) == 1
	}
	var all []flow.DefinitionInfo
	require.Eventually(t, func() bool {
		all, err = client.Definitions().List(ctx, "")
		return err == nil && len(served(all, "default", "steps")) == 1 && len(served(all, "other", "steps")) == 1 &&
			registered(all, "default", "steps") && idleSeen()
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{v1.ID()}, served(all, "default", "steps"))
	require.Equal(t, []string{other.ID()}, served(all, "other", "steps"))
	for i := 1; i < len(all); i++ {
		require.True(t, all[i-1].Queue < all[i].Queue || all[i-1].Queue == all[i].Queue && all[i-1].Definition < all[i].Definition,
			"sorted by queue and definition")
	}
	for _, d := range all {
		if d.Queue == "default" && d.Definition == "steps" {
			require.Equal(t, "v1", d.BuildID)
			require.False(t, d.UpdatedAt.IsZero())
			w := d.Workers[0]
			require.Equal(t, "v1", w.BuildID)
			require.NotEmpty(t, w.Name)
			require.NotEmpty(t, w.Host)
			require.False(t, w.BeatAt.IsZero())
		}
	}

	mine, err := client.Definitions().List(ctx, "other")
	require.NoError(t, err)
	require.NotEmpty(t, mine)
	for _, d := range mine {
		require.Equal(t, "other", d.Queue)
	}
	none, err := client.Definitions().List(ctx, "nobody-here")
	require.NoError(t, err)
	require.Empty(t, none)
	require.NotNil(t, none)

	resp, err := http.Get("http://" + h.HTTPAddr() + "/v1/definitions?queue=default")
	require.NoError(t, err)
	defer func() { require.NoError(t, resp.Body.Close()) }()
	var got api.DefinitionsResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	require.Equal(t, []string{v1.ID()}, served(got.Definitions, "default", "steps"))
	require.Len(t, got.Idle, 1, "the worker that registers nothing")
	require.Equal(t, idle.ID(), got.Idle[0].ID)

	require.NoError(t, other.Stop(context.Background()))
	require.Eventually(t, func() bool {
		defs, err := client.Definitions().List(ctx, "other")
		return err == nil && len(defs) > 0 && served(defs, "other", "steps") != nil && len(served(defs, "other", "steps")) == 0
	}, 10*time.Second, 5*time.Millisecond, "a stopped worker's definitions stay listed, with no workers")
}
