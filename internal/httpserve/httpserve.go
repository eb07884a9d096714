// Package httpserve builds Flow's HTTP servers with bounded resources: a cap on open
// connections, and deadlines on reading a request's headers, on reading the whole request
// (headers and body), on writing the answer, and on keeping an idle connection open. A slow
// or idle client holds one connection for a bounded time, and all clients together hold at
// most Config.MaxConns file handles, so HTTP load cannot exhaust the process's file handles
// that the embedded nats-server needs (see internal/natsserver's file budget).
//
// # Long polls and streams
//
// The write deadline (Config.WriteTimeout) bounds a request's handler and answer. A handler that
// holds a request longer on purpose (a long poll) calls [Extend] with the time it needs. An
// answer streamed as server-sent events (Content-Type text/event-stream) gets a rolling deadline
// instead: each write and flush must finish within WriteTimeout, however long the stream lasts,
// so a stream is cut only when its reader stops reading.
package httpserve

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/netutil"
)

// Config bounds a server's resources. The zero value takes every default; cmd/flowd loads it
// from the environment under each service's prefix (e.g. FLOW_INGRESS_HTTP_MAX_CONNS).
type Config struct {
	// MaxConns caps the connections open at once. When it is reached the server accepts no more
	// until one closes: new clients wait in the kernel's listen queue, and are served as slow or
	// idle ones are cut by the timeouts below. Defaults to 1024 (DefaultMaxConns).
	MaxConns int `envconfig:"MAX_CONNS"`
	// ReadHeaderTimeout bounds reading a request's headers. Defaults to 10 seconds.
	ReadHeaderTimeout time.Duration `envconfig:"READ_HEADER_TIMEOUT"`
	// ReadTimeout bounds reading a whole request, headers and body: a body still arriving after
	// it is cut and the connection closed. Defaults to 30 seconds.
	ReadTimeout time.Duration `envconfig:"READ_TIMEOUT"`
	// WriteTimeout bounds the time from the end of a request's headers to the end of its answer,
	// except for long polls, which set their own (see Extend), and event streams, each of whose
	// writes it bounds. Defaults to 45 seconds: longer than the 30 seconds within which every
	// handler answers.
	WriteTimeout time.Duration `envconfig:"WRITE_TIMEOUT"`
	// IdleTimeout bounds how long a kept-alive connection waits for its next request. Defaults
	// to 60 seconds.
	IdleTimeout time.Duration `envconfig:"IDLE_TIMEOUT"`
	// MaxHeaderBytes bounds a request's headers. Defaults to 64 KiB.
	MaxHeaderBytes int `envconfig:"MAX_HEADER_BYTES"`
	// ConnState, when set, is called as http.Server.ConnState is, for tests and metrics.
	ConnState func(net.Conn, http.ConnState) `ignored:"true"`
}

// The defaults of Config.
const (
	DefaultMaxConns          = 1024
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 45 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
)

// WithDefaults returns c with each zero field set to its default.
func (c Config) WithDefaults() Config {
	set := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	set(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	set(&c.ReadTimeout, DefaultReadTimeout)
	set(&c.WriteTimeout, DefaultWriteTimeout)
	set(&c.IdleTimeout, DefaultIdleTimeout)
	return c
}

// Validate returns an error naming the first field of c that is negative; prefix is the
// environment prefix of the fields, for the message (e.g. "FLOW_INGRESS_HTTP_").
func (c Config) Validate(prefix string) error {
	var errs []error
	check := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s%s must not be negative, got %d", prefix, name, v))
		}
	}
	check("MAX_CONNS", int64(c.MaxConns))
	check("MAX_HEADER_BYTES", int64(c.MaxHeaderBytes))
	for name, d := range map[string]time.Duration{"READ_HEADER_TIMEOUT": c.ReadHeaderTimeout, "READ_TIMEOUT": c.ReadTimeout,
		"WRITE_TIMEOUT": c.WriteTimeout, "IDLE_TIMEOUT": c.IdleTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s%s must not be negative, got %s", prefix, name, d))
		}
	}
	return errors.Join(errs...)
}

// New returns a server answering with h, bounded by cfg (zero fields take their defaults), and
// ln wrapped to hold at most cfg.MaxConns connections: serve with srv.Serve(limited). Shut it
// down with srv.Shutdown as any http.Server.
func New(ln net.Listener, h http.Handler, cfg Config) (srv *http.Server, limited net.Listener) {
	cfg = cfg.WithDefaults()
	srv = &http.Server{
		Handler:           &deadlines{h: h, write: cfg.WriteTimeout},
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ConnState:         cfg.ConnState,
	}
	return srv, netutil.LimitListener(ln, cfg.MaxConns)
}

// Extend gives the request answered through w until d from now to finish its answer, instead
// of the server's WriteTimeout: for a long poll, which holds the request while it waits. It
// returns the error of http.ResponseController.SetWriteDeadline.
func Extend(w http.ResponseWriter, d time.Duration) error {
	return http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}

// deadlines serves each request with h, giving event streams a rolling write deadline.
type deadlines struct {
	h     http.Handler
	write time.Duration
}

func (d *deadlines) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.h.ServeHTTP(&streamWriter{ResponseWriter: w, write: d.write}, r)
}

// streamWriter moves the write deadline before each write once the answer is known to be an
// event stream. It implements http.Flusher, and Unwrap for http.ResponseController.
type streamWriter struct {
	http.ResponseWriter
	rc        *http.ResponseController // made on first use
	write     time.Duration
	headerOut bool
	stream    bool
}

func (s *streamWriter) WriteHeader(status int) {
	if !s.headerOut {
		s.headerOut = true
		ct := s.Header().Get("Content-Type")
		s.stream = strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream")
		s.roll()
	}
	s.ResponseWriter.WriteHeader(status)
}

func (s *streamWriter) Write(b []byte) (int, error) {
	if !s.headerOut {
		s.WriteHeader(http.StatusOK)
	}
	s.roll()
	return s.ResponseWriter.Write(b)
}

func (s *streamWriter) Flush() {
	if !s.headerOut {
		s.WriteHeader(http.StatusOK)
	}
	s.roll()
	_ = s.controller().Flush()
}

func (s *streamWriter) roll() {
	if s.stream {
		_ = s.controller().SetWriteDeadline(time.Now().Add(s.write))
	}
}

func (s *streamWriter) controller() *http.ResponseController {
	if s.rc == nil {
		s.rc = http.NewResponseController(s.ResponseWriter)
	}
	return s.rc
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (s *streamWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
