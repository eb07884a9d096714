package ingress_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/httpserve"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/ingress"
)

// connCounter counts a server's open connections and their peak.
type connCounter struct {
	mu         sync.Mutex
	open, peak int
}

func (c *connCounter) state(_ net.Conn, st http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch st {
	case http.StateNew:
		c.open++
		c.peak = max(c.peak, c.open)
	case http.StateClosed, http.StateHijacked:
		c.open--
	}
}

func (c *connCounter) peakOpen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}

// TestSlowClientsCannotTakeTheProcessDown: a few hundred clients that send a request's headers
// and then trickle its body hold at most MaxConns connections (file handles) and each for at
// most the read timeout; JetStream, in the same process, keeps answering meanwhile, and a normal
// request is answered once they are cut.
func TestSlowClientsCannotTakeTheProcessDown(t *testing.T) {
	t.Parallel()
	const maxConns, slow = 32, 300
	var conns connCounter
	b := setup(t, ingress.Config{HTTP: httpserve.Config{MaxConns: maxConns, ReadHeaderTimeout: 500 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, ConnState: conns.state}})

	clients := make([]net.Conn, slow)
	for i := range clients {
		c, err := net.Dial("tcp", b.in.HTTPAddr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = io.WriteString(c, "POST /v1/workflows/gate/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
		require.NoError(t, err)
		clients[i] = c
	}
	// Each trickles a byte every 100 ms (its body would take hours) until the server cuts it.
	var cut atomic.Int64
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = c.SetReadDeadline(time.Now().Add(time.Minute))
				_, _ = io.Copy(io.Discard, c) // returns when the server closes the connection
				cut.Add(1)
			}()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					if _, err := c.Write([]byte(" ")); err != nil {
						<-done
						return
					}
				}
			}
		})
	}

	// JetStream answers while they are held.
	kv, err := b.js.CreateOrUpdateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "slow_clients_probe"})
	require.NoError(t, err)
	for i := range 5 {
		ctx, cancel := contextWithTimeout(t, 5*time.Second)
		_, err := kv.Put(ctx, "k", fmt.Appendf(nil, "%d", i))
		require.NoError(t, err, "a KV put during the attack")
		st, err := b.js.Stream(ctx, streams.History)
		require.NoError(t, err)
		_, err = st.Info(ctx)
		require.NoError(t, err, "a stream info during the attack")
		cancel()
	}

	wg.Wait() // every slow client was cut
	require.EqualValues(t, slow, cut.Load())
	// The listener frees a connection's slot when the server closes it, a moment before the
	// server reports it closed: the count may lag by the connections closing at that moment.
	require.LessOrEqual(t, conns.peakOpen(), maxConns+8, "at most MaxConns connections were open at once (without the cap: %d)", slow)

	status, e := b.do(t, httpReq{path: "/v1/workflows/gate/runs", contentType: "application/json", body: `{"run_id":"after-the-storm"}`})
	require.Equal(t, http.StatusCreated, status, "%s", e.Message)
}

// TestSlowBodyIsCut: a body that does not arrive within the read timeout is refused and its
// connection closed.
func TestSlowBodyIsCut(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{HTTP: httpserve.Config{ReadTimeout: 300 * time.Millisecond}})
	c, err := net.Dial("tcp", b.in.HTTPAddr())
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "POST /v1/runs/x/signals/go HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n\"ab")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	out, err := io.ReadAll(c)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server closed the connection (read %q)", out)
}

// TestIdleKeepAliveIsClosed: a kept-alive connection is closed after IdleTimeout.
func TestIdleKeepAliveIsClosed(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{HTTP: httpserve.Config{IdleTimeout: 200 * time.Millisecond}})
	c, err := net.Dial("tcp", b.in.HTTPAddr())
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	out, err := io.ReadAll(c) // the answer, then the close
	require.NoError(t, err, "the server closed the idle connection (read %q)", out)
	require.Contains(t, string(out), "200 OK")
}

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

// TestLongPollOutlivesTheWriteTimeout: an update's ?wait= holds the request longer than the
// server's write timeout, and its answer still arrives.
func TestLongPollOutlivesTheWriteTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, ingress.Config{HTTP: httpserve.Config{WriteTimeout: 200 * time.Millisecond}})
	_, err := b.client.Start(t.Context(), "gate", nil, &flow.StartOptions{RunID: "held"})
	require.NoError(t, err)
	b.hookToken(t, "held")
	// Paused, the run decides nothing: the update stays pending through the wait.
	status, e := b.do(t, httpReq{path: "/v1/runs/held/pause", contentType: "application/json"})
	require.Equal(t, http.StatusAccepted, status, "%s", e.Message)
	status, e = b.do(t, httpReq{path: "/v1/runs/held/updates/approve?update_id=u1", contentType: "application/json", body: `1`})
	require.Equal(t, http.StatusAccepted, status, "%s", e.Message)
	start := time.Now()
	status, e = b.do(t, httpReq{method: http.MethodGet, path: "/v1/runs/held/updates/u1?wait=1s"})
	require.Equal(t, http.StatusOK, status, "%s", e.Message)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "the request waited")
}
