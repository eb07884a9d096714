package crashtest

import (
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natstest"
)

// backend is the NATS a scenario runs on: one embedded server, or a cluster of three with
// Flow's streams at three replicas, whose servers the scenario's connections are spread over.
type backend struct {
	// url is what child processes dial: every server of the cluster.
	url     string
	connect func(t *testing.T) *nats.Conn
}

// backends are the NATS set-ups each process crash scenario runs on.
var backends = []struct {
	name  string
	start func(t *testing.T) backend
}{
	{"Single", singleServer},
	{"Cluster", threeServers},
}

func singleServer(t *testing.T) backend {
	srv := natstest.RunJetStream(t)
	return backend{url: srv.ClientURL(), connect: func(t *testing.T) *nats.Conn { return natstest.Connect(t, srv) }}
}

func threeServers(t *testing.T) backend {
	c := natstest.RunCluster(t, 3)
	var next atomic.Int32
	return backend{url: c.URLs(), connect: func(t *testing.T) *nats.Conn { return c.Connect(t, int(next.Add(1))%c.Len()) }}
}

// jetStream returns a JetStream context on a new connection.
func (b backend) jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(b.connect(t))
	require.NoError(t, err)
	return js
}
