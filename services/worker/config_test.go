package worker_test

import (
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

func TestConfigFromEnvironment(t *testing.T) {
	t.Setenv("FLOW_NATS_URL", "nats://nats-1:4222")
	t.Setenv("FLOW_QUEUE", "orders")
	t.Setenv("FLOW_ACK_WAIT", "45s")
	t.Setenv("FLOW_STREAMS_REPLICAS", "3")
	t.Setenv("FLOW_STREAMS_LEASE_TTL", "5s")
	t.Setenv("FLOW_SCHEDULER_NAME", "scheduler-0")

	var w worker.Config
	require.NoError(t, envconfig.Process("FLOW", &w))
	require.Equal(t, worker.Config{NATSURL: "nats://nats-1:4222", Queue: "orders", AckWait: 45 * time.Second,
		Streams: w.Streams}, w)
	require.Equal(t, 3, w.Streams.Replicas)

	var s scheduler.Config
	require.NoError(t, envconfig.Process("FLOW", &s))
	require.Equal(t, "scheduler-0", s.Name)
	require.Equal(t, 5*time.Second, s.Streams.LeaseTTL)

	_, err := worker.New(worker.Config{AckWait: time.Millisecond}, nil)
	require.ErrorContains(t, err, "a registry is required")
}
