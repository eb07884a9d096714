package worker_test

import (
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/services/history"
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
	require.Equal(t, worker.Config{NATS: w.NATS, Queue: "orders", AckWait: 45 * time.Second,
		HTTPAddr: worker.DefaultHTTPAddr, Streams: w.Streams}, w)
	require.Equal(t, "nats://nats-1:4222", w.NATS.URL)
	require.Equal(t, 3, w.Streams.Replicas)

	var s scheduler.Config
	require.NoError(t, envconfig.Process("FLOW", &s))
	require.Equal(t, "scheduler-0", s.Name)
	require.Equal(t, 5*time.Second, s.Streams.LeaseTTL)
	require.Equal(t, scheduler.DefaultHTTPAddr, s.HTTPAddr, "loaded from the environment, the probes listen by default")

	t.Setenv("FLOW_WORKER_HTTP_ADDR", "off")
	t.Setenv("FLOW_SCHEDULER_HTTP_ADDR", "0.0.0.0:9422")
	w, s = worker.Config{}, scheduler.Config{}
	require.NoError(t, envconfig.Process("FLOW", &w))
	require.NoError(t, envconfig.Process("FLOW", &s))
	require.Equal(t, "off", w.HTTPAddr)
	require.Equal(t, "0.0.0.0:9422", s.HTTPAddr)

	_, err := worker.New(worker.Config{AckWait: time.Millisecond}, nil)
	require.ErrorContains(t, err, "a registry is required")
}

// TestNATSEnvironmentNames checks the names of the connection settings in every service's
// configuration, and that envconfig reads no unprefixed fallback such as USER.
func TestNATSEnvironmentNames(t *testing.T) {
	t.Setenv("USER", "login-name")
	t.Setenv("NATS_URL", "nats://from-nats-cli:4222") // read by Dial, not by envconfig
	for _, tc := range []struct {
		env  string
		want natsconn.Config
	}{
		{"FLOW_NATS_URL", natsconn.Config{URL: "v"}},
		{"FLOW_NATS_CREDS", natsconn.Config{Creds: "v"}},
		{"FLOW_NATS_NKEY", natsconn.Config{NKey: "v"}},
		{"FLOW_NATS_USER", natsconn.Config{User: "v"}},
		{"FLOW_NATS_PASSWORD", natsconn.Config{Password: "v"}},
		{"FLOW_NATS_TOKEN", natsconn.Config{Token: "v"}},
		{"FLOW_NATS_TLS_CA", natsconn.Config{TLS: natsconn.TLS{CA: "v"}}},
		{"FLOW_NATS_TLS_CERT", natsconn.Config{TLS: natsconn.TLS{Cert: "v"}}},
		{"FLOW_NATS_TLS_KEY", natsconn.Config{TLS: natsconn.TLS{Key: "v"}}},
		{"FLOW_NATS_CONTEXT", natsconn.Config{Context: "v"}},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, "v")
			var w worker.Config
			require.NoError(t, envconfig.Process("FLOW", &w))
			require.Equal(t, tc.want, w.NATS)
			var s scheduler.Config
			require.NoError(t, envconfig.Process("FLOW", &s))
			require.Equal(t, tc.want, s.NATS)
			var h history.Config
			require.NoError(t, envconfig.Process("FLOW", &h))
			require.Equal(t, tc.want, h.NATS)
		})
	}
	t.Run("FLOW_NATS_TLS_FIRST", func(t *testing.T) {
		t.Setenv("FLOW_NATS_TLS_FIRST", "true")
		var w worker.Config
		require.NoError(t, envconfig.Process("FLOW", &w))
		require.Equal(t, natsconn.Config{TLS: natsconn.TLS{First: true}}, w.NATS)
	})
}
