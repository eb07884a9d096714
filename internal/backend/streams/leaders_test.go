package streams_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natstest"
)

// SpreadLeaders moves history streams led by one server to the others, one per call, until each
// of three servers leads one of three partitions.
func TestSpreadLeaders(t *testing.T) {
	t.Parallel()
	c := natstest.RunClusterWith(t, 3, 3)
	js := c.JetStream(t, 0)
	l := streams.NewLayout(3)
	ctx := t.Context()

	// Gather every partition's leadership on server 0.
	for _, name := range l.Streams() {
		require.Eventually(t, func() bool {
			if c.StreamLeader(t, name) == 0 {
				return true
			}
			body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": c.Name(0)}})
			_, _ = js.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+name, body, 2*time.Second)
			return false
		}, 30*time.Second, 200*time.Millisecond, "stream %s's leadership never reached server 0", name)
	}

	var moves []string
	require.Eventually(t, func() bool {
		leaders, err := streams.Leaders(ctx, js, l)
		require.NoError(t, err)
		sorted := slices.Sorted(slices.Values(leaders))
		if slices.Equal(sorted, []string{c.Name(0), c.Name(1), c.Name(2)}) {
			return true
		}
		stream, to, err := streams.SpreadLeaders(ctx, js, l)
		if err == nil && stream != "" {
			moves = append(moves, stream+" to "+to)
		}
		return false
	}, 60*time.Second, 250*time.Millisecond, "the leaders were not spread; moves %v", moves)
	require.GreaterOrEqual(t, len(moves), 2, "two of the three streams moved: %v", moves)

	stream, _, err := streams.SpreadLeaders(ctx, js, l)
	require.NoError(t, err)
	require.Empty(t, stream, "spread leaders stay")

	one, _, err := streams.SpreadLeaders(ctx, js, streams.Layout{})
	require.NoError(t, err)
	require.Empty(t, one, "one history stream has nothing to spread")
}
