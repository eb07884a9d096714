package natstest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natstest"
)

func TestRunCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := natstest.RunCluster(t, 3)
	t.Logf("RunCluster(3) took %s", time.Since(start))

	require.Equal(t, 3, c.Len())
	require.Len(t, strings.Split(c.URLs(), ","), 3)
	names := map[string]bool{}
	for i := range c.Len() {
		require.NotEmpty(t, c.URL(i))
		names[c.Name(i)] = true
		require.Equal(t, c.Name(i), c.Server(i).NATS().Name())
	}
	require.Len(t, names, 3, "server names are unique")

	leader := c.StreamLeader(t, streams.History)
	follower := (leader + 1) % c.Len()
	nc := c.Connect(t, follower)
	require.Equal(t, c.URL(follower), nc.ConnectedUrl(), "Connect stays on the server asked for")

	js := c.JetStream(t, follower)
	for _, name := range []string{streams.History, streams.Tasks, "KV_" + streams.RunsBucket, "KV_" + streams.LeasesBucket} {
		st, err := js.Stream(t.Context(), name)
		require.NoError(t, err)
		info := st.CachedInfo()
		require.Equal(t, 3, info.Config.Replicas, name)
		require.NotEmpty(t, info.Cluster.Leader, name)
		require.Len(t, info.Cluster.Replicas, 2, name)
		if strings.HasPrefix(name, "KV_") {
			require.False(t, info.Config.AllowRollup, "%s allows rollups", name)
		}
	}
	require.Equal(t, c.Name(leader), func() string {
		st, err := js.Stream(t.Context(), streams.History)
		require.NoError(t, err)
		return st.CachedInfo().Cluster.Leader
	}())

	// A write through a follower is forwarded to the leader and replicated.
	ack, err := js.Publish(t.Context(), streams.Layout{}.Subject("cluster-smoke"), []byte("[]"))
	require.NoError(t, err)
	require.Equal(t, streams.History, ack.Stream)
}
