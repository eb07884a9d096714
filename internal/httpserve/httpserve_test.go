package httpserve_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/httpserve"
)

type testBundle struct {
	addr string
	// open and peak count the server's open connections.
	open, peak atomic.Int64
}

func setup(t *testing.T, h http.Handler, cfg httpserve.Config) *testBundle {
	t.Helper()
	b := &testBundle{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv, limited := httpserve.New(&countingListener{Listener: ln, b: b}, h, cfg)
	go func() { _ = srv.Serve(limited) }()
	t.Cleanup(func() { _ = srv.Close() })
	b.addr = ln.Addr().String()
	return b
}

// countingListener counts the connections it accepted that are not closed yet.
type countingListener struct {
	net.Listener
	b  *testBundle
	mu sync.Mutex
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if n := l.b.open.Add(1); n > l.b.peak.Load() {
		l.b.peak.Store(n)
	}
	l.mu.Unlock()
	return &countedConn{Conn: c, b: l.b}, nil
}

type countedConn struct {
	net.Conn
	b    *testBundle
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.b.open.Add(-1) })
	return c.Conn.Close()
}

// send dials the server and writes raw on the connection, which the test's end closes.
func (b *testBundle) send(t *testing.T, raw string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", b.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	return c
}

// get GETs the server's root and returns the body of the answer.
func (b *testBundle) get(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + b.addr)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// closedWithin reads from c until the server closes it (an EOF or a reset), failing if it has
// not within d. It returns what was read.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) string {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(d)))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		require.Failf(t, "the connection stays open", "the server has not closed it within %s (read %q)", d, b)
	}
	return string(b)
}

var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestTimeout)
		return
	}
	_, _ = fmt.Fprintf(w, "read %d", len(b))
})

func TestTimeouts(t *testing.T) {
	t.Parallel()

	t.Run("SlowHeadersAreCut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, echo, httpserve.Config{ReadHeaderTimeout: 200 * time.Millisecond})
		c := b.send(t, "POST / HTTP/1.1\r\nHost: x\r\n")
		closedWithin(t, c, 5*time.Second)
	})

	t.Run("SlowBodyIsCut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, echo, httpserve.Config{ReadTimeout: 300 * time.Millisecond})
		c := b.send(t, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
		stop := make(chan struct{})
		defer close(stop)
		go func() { // a byte every 50 ms: the body would take 50 s
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte{' '}); err != nil {
						return
					}
				}
			}
		}()
		start := time.Now()
		out := closedWithin(t, c, 5*time.Second)
		require.NotContains(t, out, "read 1000")
		require.Less(t, time.Since(start), 5*time.Second)
	})

	t.Run("IdleKeepAliveIsClosed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, echo, httpserve.Config{IdleTimeout: 200 * time.Millisecond})
		c := b.send(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, resp.Body.Close())
		closedWithin(t, c, 5*time.Second)
	})

	t.Run("LongPollExtendsItsDeadline", func(t *testing.T) {
		t.Parallel()
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			require.NoError(t, httpserve.Extend(w, 5*time.Second))
			<-time.After(500 * time.Millisecond) // the poll's wait
			_, _ = io.WriteString(w, "done")
		})
		b := setup(t, h, httpserve.Config{WriteTimeout: 100 * time.Millisecond})
		require.Equal(t, "done", b.get(t))
	})

	t.Run("EventStreamsHaveARollingDeadline", func(t *testing.T) {
		t.Parallel()
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for i := range 10 {
				<-tick.C
				_, _ = fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
		})
		// The stream lasts 500 ms, five times the write timeout; each write takes far less.
		b := setup(t, h, httpserve.Config{WriteTimeout: 100 * time.Millisecond})
		require.Equal(t, 10, strings.Count(b.get(t), "data: "))
	})

	t.Run("PlainAnswersKeepTheWriteTimeout", func(t *testing.T) {
		t.Parallel()
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-time.After(400 * time.Millisecond)
			_, _ = io.WriteString(w, "late")
		})
		b := setup(t, h, httpserve.Config{WriteTimeout: 100 * time.Millisecond})
		resp, err := http.Get("http://" + b.addr)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
		}
		require.Error(t, err, "an answer after the write timeout is not delivered")
	})
}

// TestMaxConns holds the connection limit's worth of slow clients: the server accepts no more
// until they are cut, then serves a waiting client.
func TestMaxConns(t *testing.T) {
	t.Parallel()
	const limit, slow = 8, 40
	b := setup(t, echo, httpserve.Config{MaxConns: limit, ReadHeaderTimeout: 300 * time.Millisecond})
	conns := make([]net.Conn, slow)
	for i := range conns {
		conns[i] = b.send(t, "GET / HTTP/1.1\r\nHost: x\r\n")
	}
	// A normal request waits its turn and is answered once slow clients are cut.
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Get("http://" + b.addr)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, c := range conns {
		closedWithin(t, c, 20*time.Second)
	}
	require.LessOrEqual(t, b.peak.Load(), int64(limit), "at most MaxConns connections were open at once")
}

func TestConfig(t *testing.T) {
	t.Parallel()
	d := httpserve.Config{}.WithDefaults()
	require.Equal(t, httpserve.Config{MaxConns: 1024, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 45 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10}, d)
	err := httpserve.Config{MaxConns: -1, IdleTimeout: -time.Second}.Validate("FLOW_X_HTTP_")
	require.ErrorContains(t, err, "FLOW_X_HTTP_MAX_CONNS must not be negative")
	require.ErrorContains(t, err, "FLOW_X_HTTP_IDLE_TIMEOUT must not be negative")
}
